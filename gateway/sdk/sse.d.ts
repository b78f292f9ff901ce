/**
 * Server-Sent Events, parsed as the HTML standard's EventSource does (docs/PROTOCOL.md 9.5): the
 * sans-I/O part of `subscribe`. Text (or lines) in, events out: `event:`, `data:` (joined with
 * `\n`), `id:` (kept as the last event id, also across events without one), `retry:`; comments
 * (`: ...`) are reported as such, since the gateway says things in them (`: subscribed`,
 * `: keepalive`, `: the gateway is shutting down`).
 */
/** One dispatched event. */
export interface SseEvent {
    /** `message` unless the event named another. */
    event: string;
    data: string;
    /** The last event id set by this event or one before it ("" if none). */
    id: string;
}
export type SseItem = {
    kind: "event";
    event: SseEvent;
} | {
    kind: "comment";
    text: string;
} | {
    kind: "retry";
    ms: number;
};
/**
 * Feed it lines (without their line break), or text as it arrives (`push`: lines are cut there,
 * a partial one waits for its end); it returns what each completes.
 */
export declare class SseParser {
    /** The current event's data lines, joined with `\n` as they come (no array per event). */
    private data;
    private name;
    private hasData;
    /** A line whose end has not come yet (`push`). */
    private buffered;
    /** The last event id seen (the stream's, not only the current event's). */
    lastId: string;
    constructor(lastId?: string);
    /**
     * What `text` and the partial line before it complete, in order. Lines end at `\n` (a `\r`
     * before it is dropped), as `LineSplitter` cuts them, but are read in place: no array of
     * lines, no string per line, only the values kept.
     */
    push(text: string): SseItem[];
    line(line: string): SseItem | undefined;
    /** The line `text[start:stop]`. */
    private field;
    private dispatch;
}
