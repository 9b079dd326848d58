/**
 * A stand-in for the network at `fetch`: each route answers from a queue the test fills (the last answer of
 * a queue repeats), and every request is recorded. Log streams are `ReadableStream`s the test writes into.
 */
import { vi } from "vitest";

export interface Recorded {
  path: string;
  query: URLSearchParams;
  headers: Headers;
}

type Answer = () => Response; // one that throws is a network error (a server that is down)

export function json(body: unknown, status = 200): Answer {
  return () => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
}

/** An event stream the test feeds: `line(id, text)`, `end(reason)`, `drop()` (closes without `end`). */
export class FakeStream {
  private controller!: ReadableStreamDefaultController<Uint8Array>;
  private readonly encoder = new TextEncoder();
  readonly body = new ReadableStream<Uint8Array>({ start: (c) => void (this.controller = c) });

  answer(): Answer {
    return () => new Response(this.body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
  }

  send(text: string) {
    this.controller.enqueue(this.encoder.encode(text));
  }

  line(id: string, text: string) {
    this.send(`event: line\nid: ${id}\ndata: ${JSON.stringify({ time: null, text })}\n\n`);
  }

  end(reason: string) {
    this.send(`event: end\ndata: ${JSON.stringify({ reason })}\n\n`);
    this.controller.close();
  }

  drop() {
    this.controller.close();
  }
}

export class Network {
  readonly requests: Recorded[] = [];
  private readonly queues = new Map<string, Answer[]>();

  constructor() {
    vi.stubGlobal("fetch", vi.fn((input: RequestInfo | URL, init?: RequestInit) => this.fetch(input, init)));
  }

  /** Queue answers for a path such as `/training/api/job`. */
  on(path: string, ...answers: Answer[]): this {
    this.queues.set(path, [...(this.queues.get(path) ?? []), ...answers]);
    return this;
  }

  to(path: string): Recorded[] {
    return this.requests.filter((r) => r.path === path);
  }

  private async fetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
    const url = new URL(String(input), "http://airflow.test");
    this.requests.push({ path: url.pathname, query: url.searchParams, headers: new Headers(init?.headers) });
    const queue = this.queues.get(url.pathname);
    if (!queue || queue.length === 0) return new Response("not found", { status: 404 });
    const answer = queue.length > 1 ? queue.shift()! : queue[0];
    return answer();
  }
}
