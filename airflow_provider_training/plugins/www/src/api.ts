/**
 * Requests to the plugin's FastAPI app (mounted at `/training` on the api-server).
 *
 * Authentication: Airflow's UI keeps its JWT in the `_token` cookie (HttpOnly, set at login) and sends no
 * Authorization header of its own; the api-server reads the cookie when a request has no bearer token. So every
 * request here is a same-origin `fetch` with the browser's cookies, and nothing reads or stores the token.
 */
import type { TaskInstanceKey } from "./types";

export const API_PREFIX = "/training/api";

/** A non-2xx answer; `status` decides what the tab says (401: log in again, 403: not allowed). */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string,
  ) {
    super(`HTTP ${status}: ${detail}`);
    this.name = "HttpError";
  }
}

/** The path the UI is served under (`<base href>`, "/" unless Airflow runs behind a prefix), no trailing "/". */
export function basePath(doc: Document = document): string {
  const href = doc.querySelector("head > base")?.getAttribute("href") ?? "/";
  return new URL(href, doc.location?.origin ?? "http://localhost").pathname.replace(/\/$/, "");
}

/** The query parameters that name the task instance on every route. */
export function taskQuery(key: TaskInstanceKey, extra: Record<string, string | number | null | undefined> = {}) {
  const query = new URLSearchParams({ dag_id: key.dagId, run_id: key.runId, task_id: key.taskId });
  const mapIndex = key.mapIndex ?? -1;
  query.set("map_index", String(mapIndex === "" ? -1 : mapIndex));
  for (const [name, value] of Object.entries(extra)) {
    if (value !== null && value !== undefined) query.set(name, String(value));
  }
  return query;
}

export function apiUrl(route: string, query: URLSearchParams): string {
  return `${basePath()}${API_PREFIX}${route}?${query.toString()}`;
}

async function errorOf(response: Response): Promise<HttpError> {
  let detail = response.statusText;
  try {
    const body: unknown = await response.json();
    if (body && typeof body === "object" && "detail" in body) {
      const value = (body as { detail: unknown }).detail;
      detail = typeof value === "string" ? value : JSON.stringify(value);
    }
  } catch {
    // not JSON: keep the status text
  }
  return new HttpError(response.status, detail);
}

export async function getJson<T>(url: string, signal?: AbortSignal): Promise<T> {
  const response = await fetch(url, {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
    signal,
  });
  if (!response.ok) throw await errorOf(response);
  return (await response.json()) as T;
}

/** Opens a `text/event-stream`; `lastEventId` goes in `Last-Event-ID`, which the server prefers to `cursor`. */
export async function openStream(url: string, lastEventId: string | null, signal: AbortSignal): Promise<Response> {
  const headers: Record<string, string> = { Accept: "text/event-stream" };
  if (lastEventId !== null) headers["Last-Event-ID"] = lastEventId;
  const response = await fetch(url, { credentials: "same-origin", headers, signal, cache: "no-store" });
  if (!response.ok) throw await errorOf(response);
  if (!response.body) throw new HttpError(response.status, "the stream has no body");
  return response;
}

/**
 * What the tab says for a failed request; `refused` names what a 403 refused: the job needs the DAG's task
 * instances, its logs the task logs as well, and the lines saved of gone pods (an XCom) XComs too.
 */
export function describeError(error: unknown, refused = "task instances"): string {
  if (error instanceof HttpError) {
    if (error.status === 401) return "Your session has expired: log in again to see this task's training job.";
    if (error.status === 403) return `You are not allowed to read this DAG's ${refused} (403 Forbidden).`;
    return `The Training API answered ${error.status}: ${error.detail}`;
  }
  return `The Training API could not be reached: ${error instanceof Error ? error.message : String(error)}`;
}
