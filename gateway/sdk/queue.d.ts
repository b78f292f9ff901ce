/**
 * What an async iterator of a live connection reads from: items pushed by the connection,
 * pulled by `for await`, ended by `close()` or by an error (thrown to the reader after the items
 * before it). `waitForRoom()` lets the producer stop reading its socket while the reader lags
 * (TCP then pushes back on the server, which knows what to do with a slow reader).
 */
export declare class AsyncQueue<T> {
    readonly highWater: number;
    private items;
    private head;
    private waiting;
    private failWaiting;
    private roomWaiters;
    private ended;
    private error;
    constructor(highWater?: number);
    get size(): number;
    push(item: T): void;
    /** No more items: readers get the rest, then the end (or `error`). */
    close(error?: unknown): void;
    /** Whether a producer should wait (`waitForRoom`) before it pushes more. */
    get full(): boolean;
    /** Resolves when the queue is below its high-water mark (or closed). */
    waitForRoom(): Promise<void> | undefined;
    next(): Promise<IteratorResult<T>>;
    private wakeProducers;
}
