import { describe, expect, it } from "vitest";

import { SseParser } from "./sse";

describe("SseParser", () => {
  it("reads event, id and multi-line data, and skips comments", () => {
    const parser = new SseParser();
    expect(parser.push(": hello\n\nevent: line\nid: 7\ndata: a\ndata: b\n\n")).toEqual([
      { event: "line", id: "7", data: "a\nb" },
    ]);
  });

  it("waits for the rest of a split event, across CRLF", () => {
    const parser = new SseParser();
    expect(parser.push("event: end\r")).toEqual([]);
    expect(parser.push('\ndata: {"reason": "done"}\r\n')).toEqual([]);
    expect(parser.push("\r\n")).toEqual([{ event: "end", id: null, data: '{"reason": "done"}' }]);
  });

  it("calls an event without a name a message", () => {
    expect(new SseParser().push("data:x\n\n")).toEqual([{ event: "message", id: null, data: "x" }]);
  });
});
