import { useEffect, useState } from "react";

import { apiUrl, getJson, taskQuery } from "../api";
import type { JobResponse, TaskInstanceKey } from "../types";

/** Used when the server gives no `refresh_seconds`. */
export const DEFAULT_REFRESH_SECONDS = 5;

export interface JobLoad {
  data: JobResponse | null;
  error: unknown;
  /** True while another refresh is planned: false once the job finished, or when nothing can change. */
  refreshing: boolean;
}

/** Whether this answer ends the refreshing: a finished job, a task that is no training task, a deleted job. */
export function isSettled(data: JobResponse): boolean {
  if (data.view === "not_training" || data.view === "deleted") return true;
  return data.view === "job" && data.status?.finished === true;
}

/** A refused request (401, 403) is not asked again: the answer would be the same. */
function isFinalError(error: unknown): boolean {
  const status = (error as { status?: unknown } | null)?.status;
  return status === 401 || status === 403;
}

/**
 * `GET /training/api/job` now, then every `refresh_seconds` while the job is not finished.
 * A failed request keeps the last answer on screen and tries again after the same delay.
 */
export function useJob(key: TaskInstanceKey): JobLoad {
  const { dagId, runId, taskId, mapIndex } = key;
  const [load, setLoad] = useState<JobLoad>({ data: null, error: null, refreshing: true });

  useEffect(() => {
    const controller = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    let delay = DEFAULT_REFRESH_SECONDS;
    const url = apiUrl("/job", taskQuery({ dagId, runId, taskId, mapIndex }));

    const poll = async () => {
      let again = true;
      try {
        const data = await getJson<JobResponse>(url, controller.signal);
        delay = data.refresh_seconds ?? DEFAULT_REFRESH_SECONDS;
        again = !isSettled(data);
        setLoad({ data, error: null, refreshing: again });
      } catch (error) {
        if (controller.signal.aborted) return;
        again = !isFinalError(error);
        setLoad((previous) => ({ data: previous.data, error, refreshing: again }));
      }
      if (again && !controller.signal.aborted) timer = setTimeout(() => void poll(), delay * 1000);
    };
    void poll();
    return () => {
      controller.abort();
      clearTimeout(timer);
    };
  }, [dagId, runId, taskId, mapIndex]);

  return load;
}
