/**
 * Server-Sent Events, parsed as the HTML standard's EventSource does (docs/PROTOCOL.md 9.5): the
 * sans-I/O part of `subscribe`. Lines in, events out: `event:`, `data:` (joined with `\n`), `id:`
 * (kept as the last event id, also across events without one), `retry:`; comments (`: ...`)
 * are reported as such, since the gateway says things in them (`: subscribed`, `: keepalive`,
 * `: the gateway is shutting down`).
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
/** Feed it lines (without their line break); it returns what each completes. */
export declare class SseParser {
    private data;
    private name;
    private hasData;
    /** The last event id seen (the stream's, not only the current event's). */
    lastId: string;
    constructor(lastId?: string);
    line(line: string): SseItem | undefined;
    private dispatch;
}
