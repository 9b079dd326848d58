/** Answers shaped as docs/ui-tab.md's contract, for a PyTorchJob with one master and one worker. */
import type { JobResponse, LogsResponse } from "../types";

export const TASK = { dagId: "e2e_train", runId: "run1", taskId: "train", mapIndex: "-1" };

export function runningJob(overrides: Partial<JobResponse> = {}): JobResponse {
  return {
    view: "job",
    detail: null,
    task: { try_number: 1, state: "deferred", operator: "PyTorchJobOperator" },
    job: {
      kind: "PyTorchJob",
      api_version: "kubeflow.org/v1",
      namespace: "default",
      name: "e2e-train",
      uid: "3f1c0b7e-0000-4000-8000-000000000001",
      link: null,
    },
    status: {
      state: "Running",
      finished: false,
      reason: "PyTorchJobRunning",
      message: "PyTorchJob e2e-train is running.",
      start_time: "2026-12-01T10:00:01Z",
      completion_time: null,
      conditions: [
        {
          type: "Running",
          status: "True",
          reason: "PyTorchJobRunning",
          message: "PyTorchJob e2e-train is running.",
          last_transition_time: "2026-12-01T10:00:05Z",
        },
        {
          type: "Created",
          status: "True",
          reason: "PyTorchJobCreated",
          message: "PyTorchJob e2e-train is created.",
          last_transition_time: "2026-12-01T10:00:00Z",
        },
      ],
    },
    replicas: [
      { type: "Master", expected: 1, active: 1, succeeded: 0, failed: 0 },
      { type: "Worker", expected: 1, active: 1, succeeded: 0, failed: 0 },
    ],
    pods: [
      {
        name: "e2e-train-master-0",
        replica: "master-0",
        phase: "Running",
        ready: true,
        restarts: 0,
        exit_code: null,
        reason: null,
        message: null,
        node: "localkube",
        created: "2026-12-01T10:00:01Z",
        warning: null,
      },
      {
        name: "e2e-train-worker-0",
        replica: "worker-0",
        phase: "Running",
        ready: true,
        restarts: 2,
        exit_code: 137,
        reason: "OOMKilled",
        message: null,
        node: "localkube",
        created: "2026-12-01T10:00:01Z",
        warning: null,
      },
    ],
    warnings: [],
    events: [
      {
        type: "Normal",
        reason: "SuccessfulCreatePod",
        message: "Created pod: e2e-train-worker-0",
        object: "PyTorchJob/e2e-train",
        count: 1,
        last_time: "2026-12-01T10:00:01Z",
      },
    ],
    log_sources: [
      { replica: "master-0", pod: "e2e-train-master-0", live: true },
      { replica: "worker-0", pod: "e2e-train-worker-0", live: true },
    ],
    refresh_seconds: 5,
    ...overrides,
  };
}

export function succeededJob(): JobResponse {
  const job = runningJob();
  return {
    ...job,
    task: { try_number: 1, state: "success", operator: "PyTorchJobOperator" },
    status: {
      ...job.status!,
      state: "Succeeded",
      finished: true,
      reason: "PyTorchJobSucceeded",
      message: "PyTorchJob e2e-train successfully completed.",
      completion_time: "2026-12-01T10:01:00Z",
    },
    replicas: [
      { type: "Master", expected: 1, active: 0, succeeded: 1, failed: 0 },
      { type: "Worker", expected: 1, active: 0, succeeded: 1, failed: 0 },
    ],
  };
}

export function logs(texts: string[], cursor: string | null, finished = false): LogsResponse {
  return {
    lines: texts.map((text) => ({ time: "2026-12-01T10:00:02Z", text })),
    cursor,
    source: "pod",
    finished,
  };
}
