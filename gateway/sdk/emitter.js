/**
 * A small typed event emitter: `on(name, fn)` returns a function that removes `fn`. A listener
 * that throws does not stop the others, nor the connection that emits (it is reported on
 * `queueMicrotask`, where the platform shows uncaught errors).
 */
export class Emitter {
    listeners = {};
    on(name, listener) {
        const set = (this.listeners[name] ??= new Set());
        set.add(listener);
        return () => this.off(name, listener);
    }
    once(name, listener) {
        const off = this.on(name, (value) => {
            off();
            listener(value);
        });
        return off;
    }
    off(name, listener) {
        this.listeners[name]?.delete(listener);
    }
    listening(name) {
        return (this.listeners[name]?.size ?? 0) > 0;
    }
    emit(name, value) {
        const set = this.listeners[name];
        if (set === undefined || set.size === 0)
            return; // the common case on a per-event path: no copy
        for (const listener of [...set]) {
            try {
                listener(value);
            }
            catch (exc) {
                queueMicrotask(() => {
                    throw exc;
                });
            }
        }
    }
}
