import { fireEvent, render, screen, waitFor } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { followTiming } from "../hooks/useLogFollow";
import TrainingPlugin from "../main";
import { logs, runningJob, TASK } from "../test/fixtures";
import { FakeStream, json, Network } from "../test/network";

const JOB = "/training/api/job";
const LOGS = "/training/api/logs";
const STREAM = "/training/api/logs/stream";

function shownLines(): string[] {
  return screen.queryAllByTestId("log-line").map((l) => l.textContent ?? "");
}

async function linesBecome(expected: string[]) {
  await waitFor(() => expect(shownLines()).toEqual(expected));
}

beforeEach(() => {
  followTiming.reconnectMs = 0;
});
afterEach(() => {
  followTiming.reconnectMs = 1000;
});

describe("the log viewer", () => {
  it("shows the tail of the first replica, then its new lines as they come", async () => {
    const stream = new FakeStream();
    const network = new Network()
      .on(JOB, json(runningJob()))
      .on(LOGS, json(logs(["epoch 1 loss 0.41"], "c1")))
      .on(STREAM, stream.answer());
    render(<TrainingPlugin {...TASK} />);

    await linesBecome(["epoch 1 loss 0.41"]);
    await waitFor(() => expect(network.to(STREAM)).toHaveLength(1));
    expect(network.to(LOGS)[0].query.get("replica")).toBe("master-0");
    expect(network.to(STREAM)[0].query.get("cursor")).toBe("c1");
    expect(screen.getByTestId("log-state")).toHaveAttribute("data-state", "live");

    stream.line("c2", "epoch 2 loss 0.30");
    await linesBecome(["epoch 1 loss 0.41", "epoch 2 loss 0.30"]);
    stream.line("c3", "model saved");
    await linesBecome(["epoch 1 loss 0.41", "epoch 2 loss 0.30", "model saved"]);

    stream.end("container exited with 0");
    await waitFor(() => expect(screen.getByTestId("log-state")).toHaveAttribute("data-state", "ended"));
    expect(screen.getByTestId("log-state")).toHaveTextContent("container exited with 0");
  });

  it("resumes a dropped stream from the last id, showing no line twice", async () => {
    const first = new FakeStream();
    const second = new FakeStream();
    const network = new Network()
      .on(JOB, json(runningJob()))
      .on(LOGS, json(logs(["a"], "c1")))
      .on(STREAM, first.answer(), second.answer());
    render(<TrainingPlugin {...TASK} />);
    await waitFor(() => expect(network.to(STREAM)).toHaveLength(1));

    first.line("c2", "b");
    first.line("c3", "c");
    await linesBecome(["a", "b", "c"]);
    first.drop();

    await waitFor(() => expect(network.to(STREAM)).toHaveLength(2));
    const resumed = network.to(STREAM)[1];
    expect(resumed.query.get("cursor")).toBe("c3");
    expect(resumed.headers.get("Last-Event-ID")).toBe("c3");

    second.line("c3", "c"); // a server that repeats the last line: skipped
    second.line("c4", "d");
    second.end("completed");
    await waitFor(() => expect(screen.getByTestId("log-state")).toHaveAttribute("data-state", "ended"));
    expect(shownLines()).toEqual(["a", "b", "c", "d"]);
  });

  it("says what went wrong when the stream is refused, and does not ask again", async () => {
    const network = new Network()
      .on(JOB, json(runningJob()))
      .on(LOGS, json(logs(["a"], "c1")))
      .on(STREAM, json({ detail: "No replica worker-9 in this job." }, 404));
    render(<TrainingPlugin {...TASK} />);

    await waitFor(() => expect(screen.getByTestId("log-state")).toHaveAttribute("data-state", "error"));
    expect(screen.getByRole("alert")).toHaveTextContent("No replica worker-9 in this job.");
    expect(network.to(STREAM)).toHaveLength(1);
  });

  it("reconnects from the last id to the api-server that replaces one shutting down", async () => {
    const first = new FakeStream();
    const second = new FakeStream();
    const down = () => {
      throw new TypeError("Failed to fetch");
    };
    const network = new Network()
      .on(JOB, json(runningJob()))
      .on(LOGS, json(logs(["a"], "c1")))
      .on(STREAM, first.answer(), down, down, second.answer());
    render(<TrainingPlugin {...TASK} />);
    await waitFor(() => expect(network.to(STREAM)).toHaveLength(1));

    first.line("c2", "b");
    await linesBecome(["a", "b"]);
    first.drop(); // the server ended the stream at its shutdown, without `end`
    await waitFor(() => expect(network.to(STREAM)).toHaveLength(4));
    expect(network.to(STREAM).slice(1).map((r) => r.headers.get("Last-Event-ID"))).toEqual(["c2", "c2", "c2"]);

    second.line("c3", "c");
    await linesBecome(["a", "b", "c"]);
    expect(screen.getByTestId("log-state")).toHaveAttribute("data-state", "live");
  });

  it("says which permission a refused log read needs", async () => {
    new Network()
      .on(JOB, json(runningJob()))
      .on(LOGS, json({ detail: "Forbidden" }, 403));
    render(<TrainingPlugin {...TASK} />);

    await waitFor(() => expect(screen.getByTestId("log-state")).toHaveAttribute("data-state", "error"));
    expect(screen.getByRole("alert")).toHaveTextContent(
      "You are not allowed to read this DAG's task logs (403 Forbidden).",
    );
  });

  it("a line split across chunks arrives whole", async () => {
    const stream = new FakeStream();
    new Network()
      .on(JOB, json(runningJob()))
      .on(LOGS, json(logs([], "c0")))
      .on(STREAM, stream.answer());
    render(<TrainingPlugin {...TASK} />);
    await waitFor(() => expect(screen.getByTestId("log-state")).toHaveAttribute("data-state", "live"));

    stream.send('event: line\nid: c1\ndata: {"time": null, "te');
    stream.send('xt": "step 1"}\n');
    stream.send("\n: keep-alive\n\n");
    await linesBecome(["step 1"]);
  });

  it("opens no stream for a finished container, and says so", async () => {
    const network = new Network().on(JOB, json(runningJob())).on(LOGS, json(logs(["done"], "c9", true)));
    render(<TrainingPlugin {...TASK} />);

    await linesBecome(["done"]);
    await waitFor(() => expect(screen.getByTestId("log-state")).toHaveAttribute("data-state", "ended"));
    expect(network.to(STREAM)).toHaveLength(0);
  });

  it("shows saved lines of a pod that is gone", async () => {
    const saved = { ...logs(["last words"], null, true), source: "saved" as const };
    new Network().on(JOB, json(runningJob())).on(LOGS, json(saved));
    render(<TrainingPlugin {...TASK} />);

    await linesBecome(["last words"]);
    expect(screen.getByTestId("log-state")).toHaveTextContent("these are the last lines the trigger saw");
  });

  it("switches to another replica", async () => {
    const network = new Network()
      .on(JOB, json(runningJob()))
      .on(LOGS, json(logs(["master line"], "m1", true)), json(logs(["worker line"], "w1", true)));
    render(<TrainingPlugin {...TASK} />);
    await linesBecome(["master line"]);

    fireEvent.change(screen.getByLabelText("Replica"), { target: { value: "worker-0" } });
    await linesBecome(["worker line"]);
    expect(network.to(LOGS).map((r) => r.query.get("replica"))).toEqual(["master-0", "worker-0"]);
  });
});
