/**
 * A small typed event emitter: `on(name, fn)` returns a function that removes `fn`. A listener
 * that throws does not stop the others, nor the connection that emits (it is reported on
 * `queueMicrotask`, where the platform shows uncaught errors).
 */
export type Listener<T> = (value: T) => void;
export declare class Emitter<Events extends {
    [name: string]: unknown;
}> {
    private listeners;
    on<K extends keyof Events>(name: K, listener: Listener<Events[K]>): () => void;
    once<K extends keyof Events>(name: K, listener: Listener<Events[K]>): () => void;
    off<K extends keyof Events>(name: K, listener: Listener<Events[K]>): void;
    protected listening<K extends keyof Events>(name: K): boolean;
    protected emit<K extends keyof Events>(name: K, value: Events[K]): void;
}
