// What a bus-events subscription starts with (Subscribe view, "Start with"): live events only,
// the last event of each type (?last=1 on the stream, PROTOCOL.md 5.15), or the last 50 events
// of each pattern (GET /v1/history/{pattern}, 9.10) drawn first, the stream then going on from
// the journal's position the history was read at (?since=), so nothing falls in between.

import { bus } from "./api.js";
import { describeBusMessage } from "./model.js";

const HISTORY = 50;
const $ = (selector) => document.querySelector(selector);

/**
 * The stream's start parameters for `types` (comma-separated); with history, its events go
 * to `add` (as rows marked "history") and `note` says what could not be read.
 */
export async function startParams(types, add, note) {
  const mode = $("#sub-start-with")?.value ?? "live";
  if (mode === "last") return { last: "1" };
  if (mode !== "history") return {};
  const events = new Map();
  let since;
  for (const pattern of types.split(",")) {
    try {
      const page = await bus.history(pattern, { limit: HISTORY });
      for (const event of page.events ?? []) events.set(event.seq, event);
      since = since === undefined ? page.seq : Math.min(since, page.seq);
    } catch (exc) {
      note(`no history of ${pattern}: ${exc?.message ?? exc}`);
    }
  }
  const ordered = [...events.values()].sort((a, b) => a.seq - b.seq);
  for (const event of ordered) {
    const row = describeBusMessage(event);
    row.kind = "history";
    row.label = `${row.label} #${event.seq}`;
    add(row);
  }
  if (ordered.length) note(`${ordered.length} events from the journal, then live`);
  return since === undefined ? {} : { since: String(since) };
}
