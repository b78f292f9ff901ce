/**
 * When to try again after a connection is lost: exponential backoff with jitter, as
 * centrifuge-js and nats.ws reconnect (and as the Python client does, bus/link/backoff.py).
 *
 * Each delay is drawn between half and all of the current step ("equal jitter": clients that
 * lost the same gateway do not all come back at the same instant), and the step doubles up to
 * `max`. A connection that opened resets it.
 */
export interface ReconnectOptions {
    /** Milliseconds before the first try (default 500). */
    initial?: number;
    /** The longest wait between tries (default 10,000 ms). */
    max?: number;
    /** Give up after this many tries in a row (default: never). */
    attempts?: number;
}
export declare class Backoff {
    private readonly random;
    readonly initial: number;
    readonly max: number;
    readonly attempts: number;
    /** Tries since the last success. */
    attempt: number;
    private step;
    constructor(options?: ReconnectOptions, random?: () => number);
    /** The next wait in milliseconds, or undefined once `attempts` are spent. */
    next(): number | undefined;
    /** The server asked for this first step (an SSE `retry:` field), within our bounds. */
    suggest(ms: number): void;
    reset(): void;
}
/** Wait `ms`, or less if `signal` aborts (then resolve false). */
export declare function sleep(ms: number, signal: AbortSignal): Promise<boolean>;
