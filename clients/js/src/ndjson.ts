/**
 * Reading a streamed answer (docs/PROTOCOL.md 9.4): NDJSON lines as they arrive.
 *
 * `LineSplitter` is the sans-I/O part (text in, complete lines out; a partial line waits for its
 * end); `ndjsonLines` drives it from a `fetch` body.
 */

/** Splits text into lines; a line without its `\n` yet is kept for the next `push`. */
export class LineSplitter {
  private buffered = "";

  /** The complete lines in `text` and what came before it (without `\n`, `\r` trimmed). */
  push(text: string): string[] {
    const all = this.buffered === "" ? text : this.buffered + text;
    const lines = all.split("\n");
    this.buffered = lines.pop() ?? "";
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i] as string;
      if (line.charCodeAt(line.length - 1) === 13) lines[i] = line.slice(0, -1); // in place: no second array
    }
    return lines;
  }

  /** What is left when the input ends (a last line without `\n`), or "". */
  end(): string {
    const rest = this.buffered;
    this.buffered = "";
    return rest;
  }
}

/** Each line of a `fetch` body (UTF-8), as it arrives; the reader is released however it ends. */
export async function* bodyLines(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const splitter = new LineSplitter();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      yield* splitter.push(decoder.decode(value, { stream: true }));
    }
    const rest = splitter.push(decoder.decode()).concat(splitter.end());
    yield* rest.filter((line) => line !== "");
  } finally {
    reader.cancel().catch(() => undefined);
  }
}
