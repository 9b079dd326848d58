import { useEffect, useState } from "react";

import { apiUrl, getJson, HttpError, openStream, taskQuery } from "../api";
import { readEvents } from "../sse";
import type { LogLine, LogsResponse, TaskInstanceKey } from "../types";

export const TAIL_LINES = 200;
/** `reconnectMs`: the pause before reopening a stream that dropped without its `end` event. */
export const followTiming = { reconnectMs: 1000 };

export type FollowState = "loading" | "live" | "reconnecting" | "ended" | "saved" | "error";

export interface LogFollow {
  lines: LogLine[];
  state: FollowState;
  /** The `end` event's reason, or what went wrong. */
  note: string | null;
  error: unknown;
}

const INITIAL: LogFollow = { lines: [], state: "loading", note: null, error: null };

function parseLine(data: string): LogLine {
  const parsed = JSON.parse(data) as Partial<LogLine>;
  return { time: parsed.time ?? null, text: parsed.text ?? "" };
}

function parseReason(data: string): string | null {
  try {
    return (JSON.parse(data) as { reason?: string }).reason ?? null;
  } catch {
    return null;
  }
}

function wait(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/**
 * The last `TAIL_LINES` lines of `replica` (`GET /training/api/logs`), then its new lines as they come
 * (`GET /training/api/logs/stream` from the returned cursor). A stream that drops is opened again with the
 * last event id, so no line is lost and none is shown twice (an id already seen is skipped as well).
 */
export function useLogFollow(key: TaskInstanceKey, replica: string | null): LogFollow {
  const { dagId, runId, taskId, mapIndex } = key;
  const [follow, setFollow] = useState<LogFollow>(INITIAL);

  useEffect(() => {
    setFollow(INITIAL);
    if (replica === null) return;
    const controller = new AbortController();
    const { signal } = controller;
    const task = { dagId, runId, taskId, mapIndex };
    const append = (more: LogLine[]) => setFollow((f) => ({ ...f, lines: [...f.lines, ...more] }));
    const set = (state: FollowState, note: string | null = null, error: unknown = null) =>
      setFollow((f) => ({ ...f, state, note, error }));

    const run = async () => {
      const first = await getJson<LogsResponse>(
        apiUrl("/logs", taskQuery(task, { replica, tail: TAIL_LINES })),
        signal,
      );
      append(first.lines);
      if (first.source === "saved") return set("saved", "The pod is gone: these are the last lines the trigger saw.");
      if (first.finished || first.cursor === null) return set("ended");

      let cursor: string = first.cursor;
      const seen = new Set<string>();
      for (;;) {
        set("live");
        const url = apiUrl("/logs/stream", taskQuery(task, { replica, cursor }));
        try {
          const response = await openStream(url, seen.size ? cursor : null, signal);
          for await (const event of readEvents(response.body!, signal)) {
            if (event.event === "end") return set("ended", parseReason(event.data));
            if (event.event !== "line") continue;
            if (event.id !== null) {
              if (seen.has(event.id)) continue;
              seen.add(event.id);
              cursor = event.id;
            }
            append([parseLine(event.data)]);
          }
        } catch (error) {
          if (signal.aborted) return;
          // A refusal or a 4xx is the answer; a dropped connection or a 5xx is tried again.
          if (error instanceof HttpError && error.status < 500) throw error;
        }
        if (signal.aborted) return;
        set("reconnecting");
        await wait(followTiming.reconnectMs, signal);
        if (signal.aborted) return;
      }
    };
    run().catch((error: unknown) => {
      if (!signal.aborted) set("error", null, error);
    });
    return () => controller.abort();
  }, [dagId, runId, taskId, mapIndex, replica]);

  return follow;
}
