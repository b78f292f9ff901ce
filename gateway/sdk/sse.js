/**
 * Server-Sent Events, parsed as the HTML standard's EventSource does (docs/PROTOCOL.md 9.5): the
 * sans-I/O part of `subscribe`. Text (or lines) in, events out: `event:`, `data:` (joined with
 * `\n`), `id:` (kept as the last event id, also across events without one), `retry:`; comments
 * (`: ...`) are reported as such, since the gateway says things in them (`: subscribed`,
 * `: keepalive`, `: the gateway is shutting down`).
 */
/**
 * Feed it lines (without their line break), or text as it arrives (`push`: lines are cut there,
 * a partial one waits for its end); it returns what each completes.
 */
export class SseParser {
    /** The current event's data lines, joined with `\n` as they come (no array per event). */
    data = "";
    name = "";
    hasData = false;
    /** A line whose end has not come yet (`push`). */
    buffered = "";
    /** The last event id seen (the stream's, not only the current event's). */
    lastId = "";
    constructor(lastId = "") {
        this.lastId = lastId;
    }
    /**
     * What `text` and the partial line before it complete, in order. Lines end at `\n` (a `\r`
     * before it is dropped), as `LineSplitter` cuts them, but are read in place: no array of
     * lines, no string per line, only the values kept.
     */
    push(text) {
        const all = this.buffered === "" ? text : this.buffered + text;
        const items = [];
        let start = 0;
        for (let end = all.indexOf("\n"); end >= 0; end = all.indexOf("\n", start)) {
            const item = this.field(all, start, end > start && all.charCodeAt(end - 1) === 13 ? end - 1 : end);
            if (item !== undefined)
                items.push(item);
            start = end + 1;
        }
        this.buffered = start === 0 ? all : all.slice(start);
        return items;
    }
    line(line) {
        return this.field(line, 0, line.length);
    }
    /** The line `text[start:stop]`. */
    field(text, start, stop) {
        if (stop === start)
            return this.dispatch();
        const first = text.charCodeAt(start);
        if (first === 58)
            return { kind: "comment", text: text.slice(start + 1, stop).trimStart() }; // ":"
        // The field name is what comes before the first colon (or the whole line); the value after
        // it, less one leading space. Names are told apart in place, without cutting them out.
        let colon = start + 1;
        while (colon < stop && text.charCodeAt(colon) !== 58)
            colon++;
        const length = colon - start;
        let from = colon < stop ? colon + 1 : stop;
        if (from < stop && text.charCodeAt(from) === 32)
            from++;
        if (first === 100 && length === 4 && text.startsWith("data", start)) {
            const value = text.slice(from, stop);
            if (this.hasData)
                this.data += "\n" + value;
            else
                this.data = value;
            this.hasData = true;
        }
        else if (first === 105 && length === 2 && text.startsWith("id", start)) {
            const value = text.slice(from, stop);
            if (!value.includes("\0"))
                this.lastId = value;
        }
        else if (first === 101 && length === 5 && text.startsWith("event", start)) {
            this.name = stop - from === 7 && text.startsWith("message", from) ? "message" : text.slice(from, stop);
        }
        else if (first === 114 && length === 5 && text.startsWith("retry", start)) {
            const value = text.slice(from, stop);
            return isDigits(value) ? { kind: "retry", ms: Number(value) } : undefined;
        }
        return undefined;
    }
    dispatch() {
        if (!this.hasData) {
            this.name = "";
            return undefined;
        }
        const event = { event: this.name || "message", data: this.data, id: this.lastId };
        this.data = "";
        this.name = "";
        this.hasData = false;
        return { kind: "event", event };
    }
}
/** One or more ASCII digits (`retry:`'s value), without a regex. */
function isDigits(value) {
    if (value.length === 0)
        return false;
    for (let i = 0; i < value.length; i++) {
        const c = value.charCodeAt(i);
        if (c < 48 || c > 57)
            return false;
    }
    return true;
}
