/**
 * When to try again after a connection is lost: exponential backoff with jitter, as
 * centrifuge-js and nats.ws reconnect (and as the Python client does, bus/link/backoff.py).
 *
 * Each delay is drawn between half and all of the current step ("equal jitter": clients that
 * lost the same gateway do not all come back at the same instant), and the step doubles up to
 * `max`. A connection that opened resets it.
 */
export class Backoff {
    random;
    initial;
    max;
    attempts;
    /** Tries since the last success. */
    attempt = 0;
    step;
    constructor(options = {}, random = Math.random) {
        this.random = random;
        this.initial = Math.max(1, options.initial ?? 500);
        this.max = Math.max(this.initial, options.max ?? 10_000);
        this.attempts = options.attempts ?? Infinity;
        this.step = this.initial;
    }
    /** The next wait in milliseconds, or undefined once `attempts` are spent. */
    next() {
        if (this.attempt >= this.attempts)
            return undefined;
        this.attempt += 1;
        const step = this.step;
        this.step = Math.min(this.step * 2, this.max);
        return Math.round(step / 2 + (this.random() * step) / 2);
    }
    /** The server asked for this first step (an SSE `retry:` field), within our bounds. */
    suggest(ms) {
        if (this.attempt === 0)
            this.step = Math.min(Math.max(ms, 1), this.max);
    }
    reset() {
        this.attempt = 0;
        this.step = this.initial;
    }
}
/** Wait `ms`, or less if `signal` aborts (then resolve false). */
export function sleep(ms, signal) {
    return new Promise((resolve) => {
        if (signal.aborted)
            return resolve(false);
        const done = (ok) => {
            clearTimeout(timer);
            signal.removeEventListener("abort", onAbort);
            resolve(ok);
        };
        const onAbort = () => done(false);
        const timer = setTimeout(() => done(true), ms);
        signal.addEventListener("abort", onAbort, { once: true });
    });
}
