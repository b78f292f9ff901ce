/**
 * Reading a streamed answer (docs/PROTOCOL.md 9.4): NDJSON lines as they arrive.
 *
 * `LineSplitter` is the sans-I/O part (text in, complete lines out; a partial line waits for its
 * end); `ndjsonLines` drives it from a `fetch` body.
 */
/** Splits text into lines; a line without its `\n` yet is kept for the next `push`. */
export declare class LineSplitter {
    private buffered;
    /** The complete lines in `text` and what came before it (without `\n`, `\r` trimmed). */
    push(text: string): string[];
    /** What is left when the input ends (a last line without `\n`), or "". */
    end(): string;
}
/** Each line of a `fetch` body (UTF-8), as it arrives; the reader is released however it ends. */
export declare function bodyLines(body: ReadableStream<Uint8Array>): AsyncGenerator<string>;
