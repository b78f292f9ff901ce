/**
 * A small typed event emitter: `on(name, fn)` returns a function that removes `fn`. A listener
 * that throws does not stop the others, nor the connection that emits (it is reported on
 * `queueMicrotask`, where the platform shows uncaught errors).
 */

export type Listener<T> = (value: T) => void;

export class Emitter<Events extends { [name: string]: unknown }> {
  private listeners: { [K in keyof Events]?: Set<Listener<Events[K]>> } = {};

  on<K extends keyof Events>(name: K, listener: Listener<Events[K]>): () => void {
    const set = (this.listeners[name] ??= new Set());
    set.add(listener);
    return () => this.off(name, listener);
  }

  once<K extends keyof Events>(name: K, listener: Listener<Events[K]>): () => void {
    const off = this.on(name, (value) => {
      off();
      listener(value);
    });
    return off;
  }

  off<K extends keyof Events>(name: K, listener: Listener<Events[K]>): void {
    this.listeners[name]?.delete(listener);
  }

  protected listening<K extends keyof Events>(name: K): boolean {
    return (this.listeners[name]?.size ?? 0) > 0;
  }

  protected emit<K extends keyof Events>(name: K, value: Events[K]): void {
    const set = this.listeners[name];
    if (set === undefined || set.size === 0) return; // the common case on a per-event path: no copy
    for (const listener of [...set]) {
      try {
        listener(value);
      } catch (exc) {
        queueMicrotask(() => {
          throw exc;
        });
      }
    }
  }
}
