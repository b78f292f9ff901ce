/**
 * What an async iterator of a live connection reads from: items pushed by the connection,
 * pulled by `for await`, ended by `close()` or by an error (thrown to the reader after the items
 * before it). `waitForRoom()` lets the producer stop reading its socket while the reader lags
 * (TCP then pushes back on the server, which knows what to do with a slow reader).
 */
export class AsyncQueue<T> {
  private items: T[] = [];
  private head = 0;
  private waiting: ((result: IteratorResult<T>) => void) | undefined;
  private failWaiting: ((error: unknown) => void) | undefined;
  private roomWaiters: (() => void)[] = [];
  private ended = false;
  private error: unknown = undefined;

  constructor(readonly highWater = 1000) {}

  get size(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    if (this.ended) return;
    if (this.waiting) {
      const resolve = this.waiting;
      this.waiting = this.failWaiting = undefined;
      resolve({ value: item, done: false });
      return;
    }
    this.items.push(item);
  }

  /** No more items: readers get the rest, then the end (or `error`). */
  close(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.error = error;
    this.wakeProducers();
    if (this.waiting && this.size === 0) {
      const resolve = this.waiting;
      const reject = this.failWaiting;
      this.waiting = this.failWaiting = undefined;
      if (error !== undefined) reject?.(error);
      else resolve({ value: undefined, done: true });
    }
  }

  /** Whether a producer should wait (`waitForRoom`) before it pushes more. */
  get full(): boolean {
    return this.items.length - this.head >= this.highWater && !this.ended;
  }

  /** Resolves when the queue is below its high-water mark (or closed). */
  waitForRoom(): Promise<void> | undefined {
    if (this.size < this.highWater || this.ended) return undefined;
    return new Promise((resolve) => this.roomWaiters.push(resolve));
  }

  next(): Promise<IteratorResult<T>> {
    if (this.size > 0) {
      const value = this.items[this.head] as T;
      this.items[this.head] = undefined as T;
      this.head += 1;
      if (this.head > 1024 && this.head * 2 > this.items.length) {
        this.items = this.items.slice(this.head);
        this.head = 0;
      }
      if (this.roomWaiters.length > 0 && this.size < this.highWater) this.wakeProducers();
      return Promise.resolve({ value, done: false });
    }
    if (this.ended) {
      if (this.error !== undefined) {
        const error = this.error;
        this.error = undefined;
        return Promise.reject(error);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => {
      this.waiting = resolve;
      this.failWaiting = reject;
    });
  }

  private wakeProducers(): void {
    const waiters = this.roomWaiters;
    this.roomWaiters = [];
    for (const wake of waiters) wake();
  }
}
