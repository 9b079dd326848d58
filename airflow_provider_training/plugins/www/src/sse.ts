/** A parser of `text/event-stream` (the WHATWG rules that the log stream uses: event, id, data, comments). */

export interface SseEvent {
  event: string;
  id: string | null;
  data: string;
}

/** Feeds chunks of text, returns the events each chunk completes; a partial event waits for the next chunk. */
export class SseParser {
  private buffer = "";
  private event = "";
  private id: string | null = null;
  private data: string[] = [];

  push(chunk: string): SseEvent[] {
    this.buffer += chunk;
    const events: SseEvent[] = [];
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (match === null) break;
      // A lone "\r" at the end may be the first half of "\r\n": wait for the next chunk.
      if (match[0] === "\r" && match.index === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      const done = this.line(line);
      if (done) events.push(done);
    }
    return events;
  }

  private line(line: string): SseEvent | null {
    if (line === "") {
      if (this.data.length === 0 && this.id === null) {
        this.event = "";
        return null;
      }
      const event = { event: this.event || "message", id: this.id, data: this.data.join("\n") };
      this.event = "";
      this.id = null;
      this.data = [];
      return event;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.id = value;
    return null;
  }
}

/** Reads a response body as events until it ends or `signal` aborts. */
export async function* readEvents(body: ReadableStream<Uint8Array>, signal: AbortSignal): AsyncGenerator<SseEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new SseParser();
  try {
    while (!signal.aborted) {
      const { done, value } = await reader.read();
      if (done) break;
      yield* parser.push(decoder.decode(value, { stream: true }));
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}
