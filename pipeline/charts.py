"""The report's charts as SVG text, written here: stacked bars, grouped bars, time series.

``busgate report`` draws four small charts. A plotting library costs a report more than its
charts are worth (matplotlib: about 1 s to import and 0.8 s to draw four PNGs, measured on 10,000
records, on a report whose Spark query takes 2 s); these functions write the few SVG elements
the charts need, with no I/O and no imports beyond the standard library.

Every mark carries its numbers, so a chart can be read (and checked) against its table:
a bar is a ``<rect class='bar'>`` with ``data-series``, ``data-label`` and ``data-value``, a point
of a series a ``<circle class='point'>`` with ``data-series``, ``data-time`` (ISO 8601) and
``data-value``; each has a ``<title>`` a browser shows on hover. Heights are proportional to
the values (or to their logarithm on a log axis); the y axis starts at 0 on a linear axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from xml.sax.saxutils import escape, quoteattr

__all__ = ["COLORS", "bars", "nice_ticks", "series", "stacked_bars"]

#: Series colours, in order (a colour-blind-safe palette).
COLORS = ("#3a7", "#d54", "#47c", "#e93", "#85b", "#5bc", "#b74", "#999")

_HEIGHT = 290
_TOP, _BOTTOM, _LEFT, _RIGHT = 30, 48, 58, 110  # plot margins: title, labels, axis, legend
_CHAR = 6.5  # px per character of 11 px sans-serif text, for layout


def _num(value: float) -> str:
    """A number as SVG text: short, no exponent."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _label(value: float) -> str:
    """A tick's text: 1200 -> 1.2k, 0.25 -> 0.25."""
    if abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top`` (about ``count`` steps: 1, 2, 2.5, 5 x 10^n).

    Args:
        top: the largest value shown (<= 0: a unit axis).
        count: about how many steps.

    Returns:
        The ticks, ascending, starting at 0; the last is >= ``top``.
    """
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    ticks = [0.0]
    while ticks[-1] < top:
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def _log_ticks(low: float, high: float) -> list[float]:
    """Powers of ten around ``[low, high]`` (both > 0)."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    if first == last:
        last += 1
    return [10.0**p for p in range(first, last + 1)]


class _Canvas:
    """An SVG document of ``width`` x ``_HEIGHT`` with a plot area, a title and a y axis."""

    def __init__(self, width: float, title: str, ylabel: str) -> None:
        self.width = width
        self.left, self.right = _LEFT, width - _RIGHT
        self.top, self.bottom = _TOP, _HEIGHT - _BOTTOM
        self.parts = [
            f"<svg xmlns='http://www.w3.org/2000/svg' width='{_num(width)}' height='{_HEIGHT}' "
            f"viewBox='0 0 {_num(width)} {_HEIGHT}' font-family='sans-serif' font-size='11'>",
            f"<title>{escape(title)}</title>",
            "<rect width='100%' height='100%' fill='#fff'/>",
            f"<text x='{_num(width / 2)}' y='18' text-anchor='middle' font-size='13'>"
            f"{escape(title)}</text>",
            f"<text transform='translate(14 {_num((self.top + self.bottom) / 2)}) rotate(-90)' "
            f"text-anchor='middle'>{escape(ylabel)}</text>",
        ]
        self.ticks: list[float] = []
        self.log = False

    def y_axis(self, ticks: list[float], log: bool) -> None:
        self.ticks, self.log = ticks, log
        for tick in ticks:
            y = self.y(tick)
            self.parts.append(
                f"<line x1='{self.left}' x2='{_num(self.right)}' y1='{_num(y)}' y2='{_num(y)}' "
                "stroke='#e5e5e5'/>"
                f"<text x='{self.left - 4}' y='{_num(y + 4)}' text-anchor='end'>"
                f"{escape(_label(tick))}</text>"
            )
        self.parts.append(
            f"<path d='M{self.left},{self.top}V{self.bottom}H{_num(self.right)}' fill='none' "
            "stroke='#444'/>"
        )

    def y(self, value: float) -> float:
        """The y coordinate of ``value`` on the axis."""
        low, high = self.ticks[0], self.ticks[-1]
        if self.log:
            value, low, high = (math.log10(max(v, low)) for v in (value, low, high))
        return self.bottom - (value - low) / (high - low) * (self.bottom - self.top)

    def legend(self, names: Sequence[str]) -> None:
        for i, name in enumerate(names):
            y = self.top + 6 + i * 16
            self.parts.append(
                f"<rect x='{_num(self.right + 12)}' y='{y}' width='10' height='10' "
                f"fill='{COLORS[i % len(COLORS)]}'/><text x='{_num(self.right + 26)}' "
                f"y='{y + 9}'>{escape(name)}</text>"
            )

    def text(self) -> str:
        return "\n".join([*self.parts, "</svg>"]) + "\n"


def _x_label(canvas: _Canvas, x: float, label: str) -> None:
    lines = label.split("\n")
    spans = "".join(
        f"<tspan x='{_num(x)}' dy='{0 if i == 0 else 13}'>{escape(line)}</tspan>"
        for i, line in enumerate(lines)
    )
    canvas.parts.append(f"<text y='{canvas.bottom + 15}' text-anchor='middle'>{spans}</text>")


def _bar(
    canvas: _Canvas,
    x: float,
    width: float,
    low: float,
    high: float,
    name: str,
    label: str,
    value: float,
    color: str,
) -> None:
    y_top, y_low = canvas.y(high), canvas.y(low)
    tip = f"{label.replace(chr(10), ' ')}: {name} {_label(value)}"
    canvas.parts.append(
        f"<rect class='bar' x='{_num(x)}' y='{_num(y_top)}' width='{_num(width)}' "
        f"height='{_num(max(0.0, y_low - y_top))}' fill='{color}' data-series={quoteattr(name)} "
        f"data-label={quoteattr(label)} data-value='{value!r}'><title>{escape(tip)}</title></rect>"
    )


def _slot_width(labels: Sequence[str]) -> float:
    longest = max((len(line) for label in labels for line in label.split("\n")), default=1)
    return max(60.0, longest * _CHAR + 12)


def stacked_bars(
    labels: Sequence[str],
    stacks: Sequence[tuple[str, Sequence[float]]],
    title: str,
    ylabel: str,
) -> str:
    """One bar per label, each series stacked on the ones before it.

    Args:
        labels: each bar's label (``\\n`` breaks a line).
        stacks: ``(series name, one value per label)``, bottom first.
        title: the chart's title.
        ylabel: the y axis' name.

    Returns:
        The SVG document.
    """
    slot = _slot_width(labels)
    canvas = _Canvas(_LEFT + _RIGHT + slot * max(1, len(labels)), title, ylabel)
    totals = [sum(values[i] for _, values in stacks) for i in range(len(labels))]
    canvas.y_axis(nice_ticks(max(totals, default=0.0)), log=False)
    for i, label in enumerate(labels):
        x, below = canvas.left + slot * i + slot * 0.2, 0.0
        for n, (name, values) in enumerate(stacks):
            value = float(values[i])
            color = COLORS[n % len(COLORS)]
            _bar(canvas, x, slot * 0.6, below, below + value, name, label, value, color)
            below += value
        _x_label(canvas, canvas.left + slot * (i + 0.5), label)
    canvas.legend([name for name, _ in stacks])
    return canvas.text()


def bars(
    labels: Sequence[str],
    groups: Sequence[tuple[str, Sequence[float]]],
    title: str,
    ylabel: str,
    *,
    log: bool = False,
) -> str:
    """Bars side by side per label, one per series.

    Args:
        labels: each group's label (``\\n`` breaks a line).
        groups: ``(series name, one value per label)``.
        title: the chart's title.
        ylabel: the y axis' name.
        log: a logarithmic y axis (every value must be > 0).

    Returns:
        The SVG document.
    """
    slot = _slot_width(labels)
    canvas = _Canvas(_LEFT + _RIGHT + slot * max(1, len(labels)), title, ylabel)
    values = [float(v) for _, vs in groups for v in vs]
    if log and values and min(values) > 0:
        canvas.y_axis(_log_ticks(min(values), max(values)), log=True)
    else:
        canvas.y_axis(nice_ticks(max(values, default=0.0)), log=False)
    width = slot * 0.8 / max(1, len(groups))
    for i, label in enumerate(labels):
        for n, (name, vs) in enumerate(groups):
            x = canvas.left + slot * i + slot * 0.1 + width * n
            value = float(vs[i])
            low = canvas.ticks[0]
            _bar(canvas, x, width, low, value, name, label, value, COLORS[n % len(COLORS)])
        _x_label(canvas, canvas.left + slot * (i + 0.5), label)
    canvas.legend([name for name, _ in groups])
    return canvas.text()


def _time_label(moment: datetime, span: float) -> str:
    if span >= 2 * 86400:
        return f"{moment:%m-%d %H:%M}"
    return f"{moment:%H:%M:%S}" if span < 600 else f"{moment:%H:%M}"


def series(lines: dict[str, list[tuple[datetime, float]]], title: str, ylabel: str) -> str:
    """Lines over time, a marker on each point.

    Args:
        lines: ``{series name: [(time, value), ...]}`` in time order.
        title: the chart's title.
        ylabel: the y axis' name.

    Returns:
        The SVG document.
    """
    canvas = _Canvas(560, title, ylabel)
    moments = sorted({t.timestamp() for points in lines.values() for t, _ in points})
    top = max((v for points in lines.values() for _, v in points), default=0.0)
    canvas.y_axis(nice_ticks(top), log=False)
    first, last = (moments[0], moments[-1]) if moments else (0.0, 1.0)
    span = last - first

    def x(moment: datetime) -> float:
        if span <= 0:
            return (canvas.left + canvas.right) / 2
        return (
            canvas.left
            + 8
            + (moment.timestamp() - first) / span * (canvas.right - canvas.left - 16)
        )

    if moments:
        tz = next(t for points in lines.values() for t, _ in points).tzinfo
        shown = moments if len(moments) <= 6 else [first + span * k / 5 for k in range(6)]
        for moment in shown:
            when = datetime.fromtimestamp(moment, tz)
            canvas.parts.append(
                f"<text x='{_num(x(when))}' y='{canvas.bottom + 15}' text-anchor='middle'>"
                f"{escape(_time_label(when, span))}</text>"
            )
    for n, (name, points) in enumerate(lines.items()):
        color = COLORS[n % len(COLORS)]
        path = " ".join(f"{_num(x(t))},{_num(canvas.y(v))}" for t, v in points)
        canvas.parts.append(
            f"<polyline class='line' points='{path}' fill='none' stroke='{color}' "
            f"stroke-width='1.5' data-series={quoteattr(name)}/>"
        )
        for t, v in points:
            canvas.parts.append(
                f"<circle class='point' cx='{_num(x(t))}' cy='{_num(canvas.y(v))}' r='3' "
                f"fill='{color}' data-series={quoteattr(name)} data-time='{t.isoformat()}' "
                f"data-value='{float(v)!r}'><title>{escape(name)} {t:%Y-%m-%d %H:%M:%S}: "
                f"{escape(_label(v))}</title></circle>"
            )
    canvas.legend(list(lines))
    return canvas.text()
