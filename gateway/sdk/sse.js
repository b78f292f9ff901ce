/**
 * Server-Sent Events, parsed as the HTML standard's EventSource does (docs/PROTOCOL.md 9.5): the
 * sans-I/O part of `subscribe`. Lines in, events out: `event:`, `data:` (joined with `\n`), `id:`
 * (kept as the last event id, also across events without one), `retry:`; comments (`: ...`)
 * are reported as such, since the gateway says things in them (`: subscribed`, `: keepalive`,
 * `: the gateway is shutting down`).
 */
/** Feed it lines (without their line break); it returns what each completes. */
export class SseParser {
    data = [];
    name = "";
    hasData = false;
    /** The last event id seen (the stream's, not only the current event's). */
    lastId = "";
    constructor(lastId = "") {
        this.lastId = lastId;
    }
    line(line) {
        if (line === "")
            return this.dispatch();
        if (line.startsWith(":"))
            return { kind: "comment", text: line.slice(1).trimStart() };
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" "))
            value = value.slice(1);
        switch (field) {
            case "event":
                this.name = value;
                return undefined;
            case "data":
                this.data.push(value);
                this.hasData = true;
                return undefined;
            case "id":
                if (!value.includes("\0"))
                    this.lastId = value;
                return undefined;
            case "retry":
                return /^\d+$/.test(value) ? { kind: "retry", ms: Number(value) } : undefined;
            default:
                return undefined;
        }
    }
    dispatch() {
        const name = this.name || "message";
        const data = this.data.join("\n");
        const had = this.hasData;
        this.data = [];
        this.name = "";
        this.hasData = false;
        return had ? { kind: "event", event: { event: name, data, id: this.lastId } } : undefined;
    }
}
