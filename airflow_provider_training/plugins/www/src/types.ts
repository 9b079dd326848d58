/** The JSON of the Training tab's HTTP API (docs/ui-tab.md, "The tab's HTTP API"). */

export type View = "job" | "not_training" | "not_submitted" | "deleted" | "cluster_error";

export type JobState =
  | "Created"
  | "Pending"
  | "Running"
  | "Restarting"
  | "Suspended"
  | "Succeeded"
  | "Failed"
  | "Unknown";

export interface TaskInfo {
  try_number: number;
  state: string | null;
  operator: string | null;
}

export interface JobRef {
  kind: string;
  api_version: string;
  namespace: string;
  name: string;
  uid: string | null;
  link: string | null;
}

export interface Condition {
  type: string;
  status: string;
  reason: string | null;
  message: string | null;
  last_transition_time: string | null;
}

export interface JobStatus {
  state: JobState;
  finished: boolean;
  reason: string | null;
  message: string | null;
  start_time: string | null;
  completion_time: string | null;
  conditions: Condition[];
}

export interface ReplicaRow {
  type: string;
  expected: number | null;
  active: number;
  succeeded: number;
  failed: number;
}

export interface Pod {
  name: string;
  replica: string | null;
  phase: string | null;
  ready: boolean | null;
  restarts: number | null;
  exit_code: number | null;
  reason: string | null;
  message: string | null;
  node: string | null;
  created: string | null;
  warning: string | null;
}

export interface StuckWarning {
  pod: string;
  reason: string;
  message: string | null;
}

export interface JobEvent {
  type: string;
  reason: string | null;
  message: string | null;
  object: string | null;
  count: number | null;
  last_time: string | null;
}

export interface LogSource {
  replica: string;
  pod: string | null;
  live: boolean;
}

/** `GET /training/api/job`: only `view` and `detail` are always present. */
export interface JobResponse {
  view: View;
  detail?: string | null;
  task?: TaskInfo | null;
  job?: JobRef | null;
  status?: JobStatus | null;
  replicas?: ReplicaRow[] | null;
  pods?: Pod[] | null;
  warnings?: StuckWarning[] | null;
  events?: JobEvent[] | null;
  log_sources?: LogSource[] | null;
  refresh_seconds?: number | null;
  /** The API server's now, which the ages of its timestamps are measured from. */
  server_time?: string | null;
}

export interface LogLine {
  time: string | null;
  text: string;
}

/** `GET /training/api/logs`. */
export interface LogsResponse {
  lines: LogLine[];
  cursor: string | null;
  source: "pod" | "saved";
  finished: boolean;
}

/** The task instance the host renders the tab for. */
export interface TaskInstanceKey {
  dagId: string;
  runId: string;
  taskId: string;
  mapIndex?: string | number | null;
}
