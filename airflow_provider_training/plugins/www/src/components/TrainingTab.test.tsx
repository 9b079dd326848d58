import { act, render, screen, within } from "@testing-library/react";
import { describe, expect, it, vi } from "vitest";

import TrainingPlugin from "../main";
import { runningJob, succeededJob, TASK } from "../test/fixtures";
import { json, Network } from "../test/network";
import type { JobResponse } from "../types";

const JOB = "/training/api/job";

function renderTab() {
  return render(<TrainingPlugin {...TASK} />);
}

describe("views", () => {
  it.each([
    ["not_training", "This task is not a training task.", "BashOperator is not an operator of the training provider."],
    ["not_submitted", "No training job has been submitted for this try yet.", "Try 2 has not created its job yet."],
    ["deleted", "The training job was deleted from the cluster.", "PyTorchJob default/e2e-train is gone (cleanup)."],
    [
      "cluster_error",
      "The Kubernetes cluster could not be read.",
      "The Kubernetes API refused get pytorchjobs.kubeflow.org in default (403).",
    ],
  ] as const)("%s says so plainly, with the detail", async (view, title, detail) => {
    new Network().on(JOB, json({ view, detail }));
    renderTab();

    const alert = await screen.findByTestId(`view-${view}`);
    expect(alert).toHaveTextContent(title);
    expect(alert).toHaveTextContent(detail);
  });

  it("asks for the task instance of its props", async () => {
    const network = new Network().on(JOB, json({ view: "not_training", detail: "x" }));
    render(<TrainingPlugin dagId="d" runId="manual__2026-12-01T10:00:00+00:00" taskId="t" mapIndex={3} />);
    await screen.findByTestId("view-not_training");

    const { query } = network.to(JOB)[0];
    expect(Object.fromEntries(query)).toEqual({
      dag_id: "d",
      run_id: "manual__2026-12-01T10:00:00+00:00",
      task_id: "t",
      map_index: "3",
    });
  });

  it("asks under the UI's base path when Airflow is served behind a prefix", async () => {
    const base = document.createElement("base");
    base.href = "/airflow/";
    document.head.append(base);
    try {
      const network = new Network().on("/airflow/training/api/job", json({ view: "not_training", detail: "x" }));
      renderTab();
      await screen.findByTestId("view-not_training");
      expect(network.requests.map((r) => r.path)).toEqual(["/airflow/training/api/job"]);
    } finally {
      base.remove();
    }
  });

  it("a 403 says the user may not read the DAG, and asks no more", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const network = new Network().on(JOB, json({ detail: "Forbidden" }, 403));
    renderTab();
    await act(() => vi.advanceTimersByTimeAsync(0));

    expect(screen.getByTestId("request-error")).toHaveTextContent(
      "You are not allowed to read this DAG's task instances (403 Forbidden).",
    );
    await act(() => vi.advanceTimersByTimeAsync(60_000));
    expect(network.to(JOB)).toHaveLength(1);
  });

  it("a 401 asks the user to log in again", async () => {
    new Network().on(JOB, json({ detail: "Not authenticated" }, 401));
    renderTab();
    expect(await screen.findByTestId("request-error")).toHaveTextContent("log in again");
  });
});

describe("the job view", () => {
  it("shows the state badge and the conditions in time order", async () => {
    new Network().on(JOB, json(runningJob({ log_sources: [] })));
    renderTab();

    expect(await screen.findByTestId("job-state")).toHaveTextContent("Running");
    expect(screen.getByText("PyTorchJob default/e2e-train")).toBeInTheDocument();
    const conditions = within(screen.getByRole("list", { name: "Conditions" })).getAllByRole("listitem");
    expect(conditions.map((c) => c.textContent)).toEqual([
      expect.stringContaining("Created=True"),
      expect.stringContaining("Running=True"),
    ]);
  });

  it("lists the replica types with their counts", async () => {
    new Network().on(JOB, json(runningJob({ log_sources: [] })));
    renderTab();

    const table = await screen.findByRole("table", { name: "Replicas" });
    const rows = within(table).getAllByRole("row").slice(1);
    expect(rows.map((r) => within(r).getAllByRole("cell").map((c) => c.textContent))).toEqual([
      ["Master", "1", "1", "0", "0"],
      ["Worker", "1", "1", "0", "0"],
    ]);
  });

  it("lists the pods: phase, restarts, last exit code and reason, node", async () => {
    new Network().on(JOB, json(runningJob({ log_sources: [] })));
    renderTab();

    const worker = await screen.findByTestId("pod-worker-0");
    const cells = within(worker).getAllByRole("cell").map((c) => c.textContent);
    expect(cells.slice(0, 6)).toEqual(["worker-0", "e2e-train-worker-0", "Running", "2", "137 OOMKilled", "localkube"]);
    expect(cells[6]).toMatch(/^\d+[smhd]$/);
    expect(screen.getByTestId("pod-master-0")).toHaveTextContent("e2e-train-master-0");
  });

  it("counts the pods' and events' ages on the API server's clock, not the browser's", async () => {
    // Created at 10:00:01 on the cluster's clock; the server's now is 42 s later, the browser's is days off.
    new Network().on(JOB, json(runningJob({ log_sources: [], server_time: "2026-12-01T10:00:43.250Z" })));
    renderTab();

    const master = await screen.findByTestId("pod-master-0");
    expect(within(master).getAllByRole("cell").at(-1)).toHaveTextContent(/^42s$/);
    const events = within(screen.getByRole("table", { name: "Events" })).getAllByRole("row").slice(1);
    expect(within(events[0]).getAllByRole("cell").at(-1)).toHaveTextContent(/^42s$/);
  });

  it("warns about stuck pods", async () => {
    const data = runningJob({
      log_sources: [],
      warnings: [
        {
          pod: "e2e-train-worker-0",
          reason: "ImagePullBackOff",
          message: 'Back-off pulling image "registry.invalid/train:1"',
        },
      ],
    });
    data.pods![1] = { ...data.pods![1], phase: "Pending", warning: "ImagePullBackOff" };
    new Network().on(JOB, json(data));
    renderTab();

    const alert = await screen.findByRole("alert");
    expect(alert).toHaveTextContent("e2e-train-worker-0 is stuck: ImagePullBackOff");
    expect(alert).toHaveTextContent('Back-off pulling image "registry.invalid/train:1"');
    expect(screen.getByTestId("pod-worker-0")).toHaveTextContent("Pending (ImagePullBackOff)");
  });

  it("shows the events", async () => {
    new Network().on(JOB, json(runningJob({ log_sources: [] })));
    renderTab();

    const table = await screen.findByRole("table", { name: "Events" });
    expect(table).toHaveTextContent("SuccessfulCreatePod");
    expect(table).toHaveTextContent("Created pod: e2e-train-worker-0");
  });
});

describe("refreshing", () => {
  it("asks again every refresh_seconds while running, and stops once finished", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const quiet = (job: JobResponse): JobResponse => ({ ...job, log_sources: [], refresh_seconds: 2 });
    const network = new Network().on(
      JOB,
      json(quiet(runningJob())),
      json(quiet(runningJob())),
      json(quiet(succeededJob())),
    );
    renderTab();

    await act(() => vi.advanceTimersByTimeAsync(0));
    expect(screen.getByTestId("job-state")).toHaveTextContent("Running");
    expect(network.to(JOB)).toHaveLength(1);

    await act(() => vi.advanceTimersByTimeAsync(1_999));
    expect(network.to(JOB)).toHaveLength(1);
    await act(() => vi.advanceTimersByTimeAsync(1));
    expect(network.to(JOB)).toHaveLength(2);

    await act(() => vi.advanceTimersByTimeAsync(2_000));
    expect(network.to(JOB)).toHaveLength(3);
    expect(screen.getByTestId("job-state")).toHaveTextContent("Succeeded");
    expect(screen.getByTestId("training-tab")).toHaveAttribute("data-refreshing", "false");

    await act(() => vi.advanceTimersByTimeAsync(60_000));
    expect(network.to(JOB)).toHaveLength(3);
    expect(vi.getTimerCount()).toBe(0);
  });

  it.each(["not_training", "deleted"] as const)("does not refresh a %s answer", async (view) => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const network = new Network().on(JOB, json({ view, detail: "d", refresh_seconds: 1 }));
    renderTab();
    await act(() => vi.advanceTimersByTimeAsync(30_000));
    expect(network.to(JOB)).toHaveLength(1);
  });

  it("keeps refreshing while no job was submitted yet", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    new Network().on(
      JOB,
      json({ view: "not_submitted", detail: "Not yet.", refresh_seconds: 1 }),
      json(runningJob({ log_sources: [], refresh_seconds: 1 })),
    );
    renderTab();
    await act(() => vi.advanceTimersByTimeAsync(0));
    expect(screen.getByTestId("view-not_submitted")).toBeInTheDocument();
    await act(() => vi.advanceTimersByTimeAsync(1_000));
    expect(screen.getByTestId("job-state")).toHaveTextContent("Running");
  });
});
