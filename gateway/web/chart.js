// A tiny SVG line chart: one series, fixed number of points, scaled to its own maximum.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 240;
const HEIGHT = 60;
const PAD = 2;

/**
 * Draw `values` (numbers or undefined for gaps) into a new or given <svg>.
 *
 * Args: values, options {points: how many slots (default values.length), unit: shown in the
 * title and the scale, svg: an existing element to redraw, label: what it shows, extra: more
 * series drawn as lines only, [{values, className}]}. Returns the <svg> element.
 */
export function lineChart(
  values,
  { points = values.length, unit = "", svg = null, label = "", extra = [] } = {},
) {
  const root = svg || document.createElementNS(SVG, "svg");
  root.setAttribute("viewBox", `0 0 ${WIDTH} ${HEIGHT}`);
  root.setAttribute("preserveAspectRatio", "none");
  root.setAttribute("role", "img");
  root.classList.add("chart");
  while (root.firstChild) root.removeChild(root.firstChild);

  const finite = values.filter((v) => Number.isFinite(v));
  const others = extra.flatMap((series) => series.values.filter((v) => Number.isFinite(v)));
  const top = Math.max(0, ...finite, ...others);
  const max = Math.max(1e-9, top) * 1.15;
  const step = (WIDTH - 2 * PAD) / Math.max(1, points - 1);
  const offset = points - values.length;
  const x = (i) => PAD + (i + offset) * step;
  const y = (v) => HEIGHT - PAD - (v / max) * (HEIGHT - 2 * PAD);

  root.appendChild(el("line", { x1: 0, x2: WIDTH, y1: HEIGHT - PAD, y2: HEIGHT - PAD, class: "axis" }));
  for (const segment of segments(values)) {
    const coords = segment.map(([i, v]) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`);
    const first = segment[0][0];
    const last = segment[segment.length - 1][0];
    const area = `M${x(first).toFixed(1)},${HEIGHT - PAD} L${coords.join(" L")} L${x(last).toFixed(1)},${HEIGHT - PAD} Z`;
    root.appendChild(el("path", { d: area, class: "area" }));
    root.appendChild(el("polyline", { points: coords.join(" "), class: "line" }));
    if (segment.length === 1) {
      const [[i, v]] = segment;
      root.appendChild(el("circle", { cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 1.8, class: "dot" }));
    }
  }
  for (const series of extra) {
    for (const segment of segments(series.values)) {
      const coords = segment.map(([i, v]) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`);
      root.appendChild(el("polyline", { points: coords.join(" "), class: `line ${series.className}` }));
    }
  }
  const latest = finite.length ? finite[finite.length - 1] : undefined;
  const title = el("title", {});
  title.textContent = `${label}: latest ${latest === undefined ? "-" : latest.toFixed(2)} ${unit}, max ${
    finite.length ? Math.max(...finite).toFixed(2) : "-"
  } ${unit}`;
  root.appendChild(title);
  root.setAttribute("aria-label", title.textContent);
  return root;
}

function segments(values) {
  const out = [];
  let current = [];
  values.forEach((v, i) => {
    if (Number.isFinite(v)) current.push([i, v]);
    else if (current.length) {
      out.push(current);
      current = [];
    }
  });
  if (current.length) out.push(current);
  return out;
}

function el(name, attrs) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}
