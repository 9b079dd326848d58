"""ReplicaLogStreamer against localkube over HTTP: pods and their logs written into the cluster's state."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
from collections.abc import AsyncIterator, Callable
from itertools import pairwise
from pathlib import Path

import pytest
import pytest_asyncio
from localkube.cluster import LocalKube

from airflow_provider_training import log_follow, logs
from airflow_provider_training.hooks import transport
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.jobs import create_job
from airflow_provider_training.kinds.base import PODS, JobKind
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.log_cursor import LogCursor, split_stamp, stamp_key, stamp_text
from airflow_provider_training.log_follow import FollowedPod
from airflow_provider_training.logs import SAVED_LINE_CHARS, ReplicaLogStreamer
from airflow_provider_training.watch import WatchHub
from tests.hooks.family_objects import (
    create_edl_children,
    create_mlkube_pod,
    edl_cluster_options,
    mlkube_pod_name,
    scripted_edl_job,
)
from tests.hooks.kube_env import (
    cluster_and_hook,
    deaf_follows,
    job_body,
    pod_manifest,
    requests_to,
    rtype,
    set_pod_state,
    until,
)

PYTORCH = get_kind("PyTorchJob")
EDL = get_kind("TrainingJob", "paddlepaddle.org/v1")
MXJOB = get_kind("MxJob", "mxnet.mlkube.io/v1beta1")
C = "pytorch"  # PyTorchJob's default container


@pytest_asyncio.fixture
async def env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[LocalKube, AsyncTrainingJobHook]]:
    async with cluster_and_hook(tmp_path, monkeypatch) as pair:
        yield pair


def lines_into(lines: list[str]) -> Callable[..., None]:
    """An ``emit`` keeping every line of each record (a record holds the lines of one read)."""
    return lambda record, **_: lines.extend(record.split("\n"))


class Streaming:
    """A streamer running as a task, and the lines it emitted."""

    def __init__(
        self,
        hook: AsyncTrainingJobHook,
        job: str = "job",
        kind: JobKind = PYTORCH,
        hub: WatchHub | None = None,
        retry_interval: float = 0.05,
        **options,
    ) -> None:
        self.lines: list[str] = []
        self.notes: list[str] = []  # which replicas it follows
        self.streamer = ReplicaLogStreamer(
            hook,
            kind,
            "default",
            job,
            emit=lines_into(self.lines),
            note=self.notes.append,
            hub=hub or WatchHub(),
            retry_interval=retry_interval,
            **options,
        )
        self.task = asyncio.get_running_loop().create_task(self.streamer.run())

    async def wait_for(self, count: int) -> list[str]:
        await until(lambda: len(self.lines) >= count)
        return self.lines

    async def stop(self) -> list[str]:
        await self.streamer.stop()
        await self.task
        return self.lines


def add_pod(
    cluster: LocalKube,
    replica: str,
    index: int,
    phase: str = "Running",
    state: str = "running",
    job: str = "job",
    **kw,
) -> str:
    pod = pod_manifest(PYTORCH, job, replica, index)
    cluster.store.create(rtype(cluster, PODS), "default", pod)
    set_pod_state(cluster, pod, phase, state, **kw)
    if state != "waiting":
        cluster.logs.start_container("default", pod["metadata"]["name"], C)
    return pod["metadata"]["name"]


def set_state(cluster: LocalKube, name: str, phase: str, state: str, **kw) -> None:
    set_pod_state(cluster, cluster.store.get(rtype(cluster, PODS), "default", name), phase, state, **kw)


def recreate_master(cluster: LocalKube, name: str, **kw) -> None:
    """The master pod deleted and created again under its name, as operators do (``kw``: add_pod's)."""
    cluster.store.delete(rtype(cluster, PODS), "default", name)
    cluster.logs.forget_pod("default", name)
    add_pod(cluster, "Master", 0, **kw)


async def following_master(
    cluster: LocalKube, hook: AsyncTrainingJobHook, line: str, **options
) -> tuple[str, Streaming]:
    """A running master pod that wrote ``line``, and a streamer (``options``: Streaming's) that emitted it."""
    master = add_pod(cluster, "Master", 0)
    cluster.logs.write("default", master, C, line + "\n")
    run = Streaming(hook, **options)
    await run.wait_for(1)
    return master, run


def log_requests(cluster: LocalKube, pod: str) -> list:
    return [r for r in requests_to(cluster, "pods") if r.path.endswith(f"/{pod}/log")]


async def test_master_lines_are_prefixed_as_they_are_written(env):
    cluster, hook = env
    master, worker = add_pod(cluster, "Master", 0), add_pod(cluster, "Worker", 0)
    cluster.logs.write("default", master, C, "epoch 1 loss 0.9\n")
    cluster.logs.write("default", worker, C, "worker noise\n")
    run = Streaming(hook)
    assert await run.wait_for(1) == ["[master-0] epoch 1 loss 0.9"]
    cluster.logs.write("default", master, C, "epoch 2 loss 0.5 ✓\n")
    await run.wait_for(2)
    cluster.logs.close_container("default", master, C)
    set_state(cluster, master, "Succeeded", "terminated")
    assert await run.stop() == ["[master-0] epoch 1 loss 0.9", "[master-0] epoch 2 loss 0.5 ✓"]
    assert log_requests(cluster, worker) == []
    assert run.streamer.pod_names == [master]


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [
        ("all", {"[master-0] m", "[worker-0] w0", "[worker-1] w1"}),
        (["worker"], {"[worker-0] w0", "[worker-1] w1"}),
    ],
)
async def test_replica_choice(env, replicas, expected):
    cluster, hook = env
    for replica, index, text in (("Master", 0, "m"), ("Worker", 0, "w0"), ("Worker", 1, "w1")):
        cluster.logs.write("default", add_pod(cluster, replica, index), C, text)
    run = Streaming(hook, replicas=replicas)
    await run.wait_for(len(expected))
    assert set(await run.stop()) == expected


async def test_a_pod_is_followed_once_its_container_starts(env):
    cluster, hook = env
    master = add_pod(cluster, "Master", 0, phase="Pending", state="waiting")
    run = Streaming(hook)
    await until(lambda: run.streamer.pod_names == [master])
    cluster.logs.start_container("default", master, C)
    cluster.logs.write("default", master, C, "started\n")
    set_state(cluster, master, "Running", "running")
    assert await run.wait_for(1) == ["[master-0] started"]
    await run.stop()
    assert all(r.status != 400 for r in log_requests(cluster, master))  # waited for the start, no guessing


async def test_a_followed_pod_that_says_nothing_holds_its_stream(env):
    """While a followed pod is silent its one follow stays open and goes on when it writes again; of the pod
    object the streamer keeps only what the follow reads (not its dicts)."""
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    cluster.logs.write("default", master, C, "one\n")
    run = Streaming(hook)
    assert await run.wait_for(1) == ["[master-0] one"]
    pod = run.streamer._pods[master]
    assert pod.stream is not None and not pod.done
    assert not [name for name in type(pod).__slots__ if isinstance(getattr(pod, name, None), dict)]
    cluster.logs.write("default", master, C, "two\n")  # the stream wakes it
    assert await run.wait_for(2) == ["[master-0] one", "[master-0] two"]
    assert len([r for r in log_requests(cluster, master) if r.query.get("follow") == "true"]) == 1
    assert await run.stop() == ["[master-0] one", "[master-0] two"]
    assert pod.done and pod.stream is None


async def test_a_pod_that_finished_before_streaming_is_read_once_in_full(env):
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    cluster.logs.write("default", master, C, "a\nb\nc\n")
    cluster.logs.close_container("default", master, C)
    set_state(cluster, master, "Failed", "terminated", exit_code=3)
    run = Streaming(hook)
    await run.wait_for(3)
    await until(lambda: run.streamer._pods[master].done)
    assert await run.stop() == ["[master-0] a", "[master-0] b", "[master-0] c"]
    reads = log_requests(cluster, master)
    # one read; stop() reads no more of a log read to its end whose container stopped
    assert len(reads) == 1 and "follow" not in reads[0].query


async def test_resumes_after_a_dropped_connection_without_loss_or_duplicates(env):
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    run = Streaming(hook)
    cluster.logs.write("default", master, C, "a\nb\nc\n")  # one write: three lines with one timestamp
    await run.wait_for(3)
    await cluster.restart()  # drops every connection, the log stream included
    cluster.logs.write("default", master, C, "d\ne\n")
    await run.wait_for(5)
    assert await run.stop() == [f"[master-0] {x}" for x in "abcde"]
    follows = [r for r in log_requests(cluster, master) if r.query.get("follow") == "true"]
    assert len(follows) >= 2 and "sinceTime" in follows[-1].query


async def test_container_restart_is_followed_without_loss(env):
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    run = Streaming(hook)
    cluster.logs.write("default", master, C, "first run\n")
    await run.wait_for(1)
    cluster.logs.write("default", master, C, "crash!\n")
    cluster.logs.close_container("default", master, C)
    set_state(cluster, master, "Running", "terminated", exit_code=1)
    cluster.logs.start_container("default", master, C)
    set_state(cluster, master, "Running", "running", restarts=1)
    cluster.logs.write("default", master, C, "second run\n")
    await run.wait_for(3)
    cluster.logs.close_container("default", master, C)
    set_state(cluster, master, "Succeeded", "terminated", restarts=1)
    assert await run.stop() == ["[master-0] first run", "[master-0] crash!", "[master-0] second run"]


async def test_restart_while_disconnected_reads_the_previous_instance_first(env):
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    run = Streaming(hook)
    cluster.logs.write("default", master, C, "one\n")
    await run.wait_for(1)
    await cluster.restart()
    # While the client reconnects: the old instance writes more, dies, and a new one starts.
    cluster.logs.write("default", master, C, "two\n")
    cluster.logs.start_container("default", master, C)
    set_state(cluster, master, "Running", "running", restarts=1)
    cluster.logs.write("default", master, C, "three\n")
    await run.wait_for(3)
    assert await run.stop() == ["[master-0] one", "[master-0] two", "[master-0] three"]
    assert any(r.query.get("previous") == "true" for r in log_requests(cluster, master))


async def test_a_pod_recreated_under_the_same_name_is_followed_again(env):
    cluster = env[0]
    master, run = await following_master(*env, "old incarnation")
    cluster.logs.close_container("default", master, C)
    recreate_master(cluster, master)
    cluster.logs.write("default", master, C, "new incarnation\n")
    await run.wait_for(2)
    assert await run.stop() == ["[master-0] old incarnation", "[master-0] new incarnation"]
    assert run.streamer.tail(master) == ["old incarnation", "new incarnation"]


def pod_reads(cluster: LocalKube, pod: str) -> list:
    """The GETs of the pod object itself (not a watch, not its log)."""
    return [r for r in requests_to(cluster, "pods", watch=False) if r.path.endswith(f"/pods/{pod}")]


async def test_a_stream_that_ends_before_the_kubelet_reports_the_end_is_not_opened_again(env):
    """The kubelet ends a follow when the container exits and reports the exit a moment later (its status
    sync): meanwhile the pod still says its container runs. The follow waits for the pod watch to bring the
    end: no second follow, no read of the pod, and none of its log once the end comes (the stream read it
    all). Before, each ending replica cost a follow opened again and two reads of the pod. A change the
    watch brought while the stream was open, its container still running, is no reason to open it again."""
    cluster = env[0]
    # retry_interval: the fallback read of the pod never comes first
    master, run = await following_master(*env, "last words", retry_interval=300)
    pod = run.streamer._pods[master]
    assert pod.stream is not None  # the stream is open and silent
    pods = rtype(cluster, PODS)
    status = cluster.store.get(pods, "default", master)["status"]
    not_ready = {**status, "conditions": [{"type": "Ready", "status": "False"}]}
    cluster.store.update_status(pods, "default", master, not_ready)  # a change; the container still runs
    await until(lambda: pod.changed)
    cluster.logs.close_container("default", master, C)
    await until(lambda: pod.waiter is not None)  # the stream ended; the follow waits for the watch
    assert pod.running and pod_reads(cluster, master) == []
    set_state(cluster, master, "Succeeded", "terminated")
    await until(lambda: pod.done)

    assert await run.stop() == ["[master-0] last words"]
    assert [r.query.get("follow") for r in log_requests(cluster, master)] == ["true"]
    assert pod_reads(cluster, master) == []


async def test_a_failed_read_after_a_complete_stream_is_no_gap(env):
    # Seen on a real kube-apiserver: a replica's follow ends with its container, and the job ends before the
    # kubelet reports the exit, so the final read is made; it can reach the pod the operator has recreated
    # under the same name (graceful deletion takes a moment there): 400, its container is waiting. Every
    # line was read; no note may say otherwise.
    cluster = env[0]
    master, run = await following_master(*env, "killed", retry_interval=300)  # no fallback read first
    pod = run.streamer._pods[master]
    cluster.logs.close_container("default", master, C)
    await until(lambda: pod.waiter is not None)  # the stream ended; the pod still says it runs
    cluster.faults.fail(400, method="GET", path=f"/{master}/log$")

    gaps = await run.streamer.stop()

    await run.task
    assert run.lines == ["[master-0] killed"]
    assert gaps == []
    assert [r.status for r in log_requests(cluster, master)] == [200, 400]  # the follow, the final read


async def test_a_stream_that_ended_with_its_container_is_not_read_again(env):
    """A replica fails: its follow ends with the container, and the pod's status says so. The stream read
    every line, so that incarnation is not read again: on a real kube-apiserver such a read could reach the
    pod the operator has meanwhile recreated under the same name (400, its container waiting). The new
    incarnation is followed, and no note says a line is missing."""
    cluster = env[0]
    master, run = await following_master(*env, "killed")
    old = run.streamer._pods[master]
    cluster.logs.close_container("default", master, C)
    set_state(cluster, master, "Failed", "terminated", exit_code=137)
    await until(lambda: old.done)
    recreate_master(cluster, master, phase="Pending", state="waiting")
    cluster.logs.start_container("default", master, C)
    set_state(cluster, master, "Running", "running")
    cluster.logs.write("default", master, C, "again\n")
    await run.wait_for(2)
    cluster.logs.close_container("default", master, C)
    set_state(cluster, master, "Succeeded", "terminated")
    await until(lambda: run.streamer._pods[master].done)

    gaps = await run.streamer.stop()

    await run.task
    assert run.lines == ["[master-0] killed", "[master-0] again"]
    assert gaps == []
    assert [r.query.get("follow") for r in log_requests(cluster, master)] == ["true", "true"]


async def test_tail_keeps_the_last_lines_per_pod(env):
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    cluster.logs.write("default", master, C, "\n".join(f"line {i}" for i in range(10)))
    run = Streaming(hook, tail_lines=3)
    await run.wait_for(10)
    await run.stop()
    assert run.streamer.tail(master) == ["line 7", "line 8", "line 9"]
    assert run.streamer.tail("unknown-pod") == []


async def test_saved_tails_are_bounded_for_the_training_tab(env):
    """What the trigger saves with its log position, for the Training tab once the pods are gone."""
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    cluster.logs.write("default", master, C, "\n".join(["early", "x" * 600, "line 1", "line 2"]))
    run = Streaming(hook, tail_lines=3)
    await run.wait_for(4)
    await run.stop()
    lines = ["x" * SAVED_LINE_CHARS, "line 1", "line 2"]
    assert run.streamer.saved_tails() == {master: {"replica": "master-0", "lines": lines}}


async def test_stop_flushes_what_was_written_last(env):
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    run = Streaming(hook)
    cluster.logs.write("default", master, C, "early\n")
    await run.wait_for(1)
    cluster.logs.write("default", master, C, "late 1\nlate 2\n")
    assert await run.stop() == ["[master-0] early", "[master-0] late 1", "[master-0] late 2"]


async def test_stop_before_run_started_reads_each_pod_once(env):
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    cluster.logs.write("default", master, C, "quick job\n")
    add_pod(cluster, "Master", 1, phase="Pending", state="waiting")  # never started: nothing to read
    lines: list[str] = []
    streamer = ReplicaLogStreamer(
        hook, PYTORCH, "default", "job", emit=lines_into(lines), note=[].append, hub=WatchHub()
    )
    await streamer.stop()
    await streamer.run()  # returns at once: it was stopped
    assert lines == ["[master-0] quick job"]


async def test_stop_reads_pods_whose_watch_events_had_not_arrived(env):
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    cluster.logs.write("default", master, C, "all\nat once\n")
    cluster.logs.close_container("default", master, C)
    set_state(cluster, master, "Succeeded", "terminated")
    run = Streaming(hook)
    await asyncio.sleep(0)  # run() has started and waits for the pod watch's first answer
    assert run.streamer.pod_names == []
    assert await run.stop() == ["[master-0] all", "[master-0] at once"]


async def test_cancelling_run_stops_everything(env):
    cluster, hook = env
    add_pod(cluster, "Master", 0)
    run = Streaming(hook)
    await until(lambda: bool(run.streamer.pod_names))
    run.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run.task
    assert all(pod.done and pod.stream is None for pod in run.streamer._pods.values())


def finished_pod(cluster: LocalKube, name: str, *lines: str) -> None:
    """A pod whose one container wrote ``lines`` and ended."""
    pod = cluster.store.get(rtype(cluster, PODS), "default", name)
    container = pod["spec"]["containers"][0]["name"]
    cluster.logs.start_container("default", name, container)
    cluster.logs.write("default", name, container, "".join(f"{line}\n" for line in lines))
    cluster.logs.close_container("default", name, container)
    set_pod_state(cluster, pod, "Succeeded", "terminated")


async def stream_to_the_end(run: Streaming, expected: int) -> list[str]:
    await run.wait_for(expected)
    await until(lambda: all(pod.done for pod in run.streamer._pods.values()))
    return await run.stop()


@pytest.mark.parametrize(
    ("replicas", "types"),
    [("all", ("trainer", "pserver", "master")), (["PSERVER"], ("pserver",)), ("master", ("trainer",))],
)
async def test_replicas_found_by_the_kinds_extra_selectors(env, replicas, types):
    """EDL: trainer, pserver and master pods carry different labels; "all" takes every one of them."""
    cluster, hook = env
    pods = create_edl_children(cluster, "example")[PODS.key]
    theirs = create_edl_children(cluster, "other")[PODS.key]
    for name in pods + theirs:
        finished_pod(cluster, name, f"hello from {name}")
    chosen = [name for name in pods if name.split("-")[1] in types]
    run = Streaming(hook, "example", EDL, replicas=replicas)
    lines = await stream_to_the_end(run, len(chosen))
    assert sorted(lines) == sorted(f"[{n.split('-')[1]} {n}] hello from {n}" for n in chosen)
    assert sorted(run.streamer.pod_names) == sorted(chosen)


async def test_selected_pods_of_another_job_are_left_out(env):
    """mlkube MxJob pods name no job: the selector takes every MxJob's pods, owns_pod keeps this job's."""
    cluster, hook = env
    replicas = (("SCHEDULER", 0), ("SERVER", 0), ("WORKER", 0), ("WORKER", 1))
    for job in ("mnist", "mnist-big"):
        for replica_type, index in replicas:
            finished_pod(cluster, create_mlkube_pod(cluster, job, replica_type, index), f"{job} {index}")
    run = Streaming(hook, "mnist", MXJOB, replicas="all")
    lines = await stream_to_the_end(run, len(replicas))
    assert sorted(lines) == sorted(f"[{t.lower()}-{i}] mnist {i}" for t, i in replicas)
    assert sorted(run.streamer.pod_names) == sorted(mlkube_pod_name("mnist", t, i) for t, i in replicas)


async def test_reading_once_keeps_only_the_jobs_own_master(env):
    cluster, hook = env
    for job in ("mnist", "mnist-big"):
        finished_pod(cluster, create_mlkube_pod(cluster, job, "WORKER", 0), f"{job} says hi")
    lines: list[str] = []
    streamer = ReplicaLogStreamer(
        hook, MXJOB, "default", "mnist", emit=lines_into(lines), note=[].append, hub=WatchHub()
    )
    await streamer.stop()  # before run(): one read of each chosen pod
    assert lines == ["[worker-0] mnist says hi"]


async def test_every_replica_type_of_an_edl_job_run_by_its_controller(tmp_path, monkeypatch):
    """The EDL controller's pods: trainers (batch Job), pservers and master (ReplicaSets), labelled apart."""
    script = {
        "trainer": {"duration": 0.05, "logs": ["{pod} trains"]},
        "pserver": {"duration": None, "logs": ["{pod} serves"]},
        "master": {"duration": None, "logs": ["{pod} coordinates"]},
    }
    async with cluster_and_hook(tmp_path, monkeypatch, **edl_cluster_options()) as (_, hook):
        await create_job(hook, EDL, scripted_edl_job("fit", script), "default")
        run = Streaming(hook, "fit", EDL, replicas="all")
        await run.wait_for(5)
        lines = await run.stop()
    verbs = {"trainer": "trains", "pserver": "serves", "master": "coordinates"}
    expected = {f"[{n.split('-')[1]} {n}] {n} {verbs[n.split('-')[1]]}" for n in run.streamer.pod_names}
    assert sorted(lines) == sorted(expected)
    assert (
        sorted(n.split("-")[1] for n in run.streamer.pod_names)
        == ["master"] + ["pserver"] * 2 + ["trainer"] * 2
    )


async def test_only_the_jobs_own_pods_of_mlkube_mxjobs_run_by_their_controller(tmp_path, monkeypatch):
    """Two mlkube MxJobs (one name a prefix of the other): the shared selector takes both, owns_pod one."""
    from localkube.controllers.builtin import BatchJobController
    from localkube.controllers.mxnet_legacy import LegacyMxnetController

    template = {"spec": {"containers": [{"name": "mxnet", "image": "mxnet"}], "restartPolicy": "OnFailure"}}
    replicas = [("SCHEDULER", 1), ("SERVER", 1), ("WORKER", 2)]
    script = {"default": {"duration": 0.05, "logs": ["{pod} says hi"]}}
    options = {"runtime": "scripted", "controllers": [LegacyMxnetController(), BatchJobController()]}
    async with cluster_and_hook(tmp_path, monkeypatch, **options) as (cluster, hook):
        for name in ("mnist", "mnist-big"):
            job = {
                "metadata": {"name": name, "annotations": {"localkube.dev/script": json.dumps(script)}},
                "spec": {
                    "jobMode": "dist",
                    "replicaSpecs": [
                        {"replicas": n, "mxReplicaType": t, "PsRootPort": 9091, "template": template}
                        for t, n in replicas
                    ],
                },
            }
            await create_job(hook, MXJOB, job, "default")
        run = Streaming(hook, "mnist", MXJOB, replicas="all")
        pods = rtype(cluster, PODS)

        def succeeded() -> int:
            return [p["status"].get("phase") for p in cluster.store.list(pods, "default")].count("Succeeded")

        await until(lambda: succeeded() == 8)  # both jobs' pods ran and wrote their logs
        await run.wait_for(4)
        lines = await run.stop()
        everyone = {p["metadata"]["name"] for p in cluster.store.list(pods, "default")}
    mine = sorted(n for n in everyone if not n.startswith("mnist-big-"))
    assert sorted(run.streamer.pod_names) == mine
    assert sorted(line.split("] ", 1)[1] for line in lines) == [f"{n} says hi" for n in mine]
    assert {line.split("] ", 1)[0] for line in lines} == {
        "[scheduler-0",
        "[server-0",
        "[worker-0",
        "[worker-1",
    }


OWNER: contextvars.ContextVar[str] = contextvars.ContextVar("OWNER", default="")


async def test_each_streamer_writes_in_its_own_context_though_the_hub_delivers_from_its_watch_task(env):
    """A triggerer routes log records to a trigger's task log by the context of the task that writes them.
    The pod watch's task is started in the first subscriber's context and delivers every streamer's pod
    events: a second job's lines must still be written in its own trigger's context, not the first's."""
    cluster, hook = env
    hub = WatchHub()
    written: list[tuple[str, str]] = []

    def start(job: str) -> asyncio.Task[None]:
        context = contextvars.copy_context()
        context.run(OWNER.set, job)
        streamer = ReplicaLogStreamer(
            hook,
            PYTORCH,
            "default",
            job,
            emit=lambda record: written.extend((OWNER.get(), line) for line in record.split("\n")),
            note=lambda line: written.append((OWNER.get(), line)),
            hub=hub,
            retry_interval=0.05,
        )
        return asyncio.get_running_loop().create_task(streamer.run(), context=context)

    first = add_pod(cluster, "Master", 0, job="first")
    cluster.logs.write("default", first, C, "from first\n")
    tasks = [start("first")]
    await until(lambda: ("first", "[master-0] from first") in written)
    tasks.append(start("second"))
    await until(lambda: hub.stats.subscribers == 2)
    second = add_pod(cluster, "Master", 0, job="second")  # its ADDED comes through the watch's task
    cluster.logs.write("default", second, C, "from second\n")
    await until(lambda: any(line == "[master-0] from second" for _, line in written))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert [(owner, line) for owner, line in written if "from" in line] == [
        ("first", "[master-0] from first"),
        ("second", "[master-0] from second"),
    ]


def test_timestamps_parse_to_nanoseconds():
    assert stamp_key("2026-01-01T00:00:01.5Z") - stamp_key("2026-01-01T00:00:01.000000001Z") == 499_999_999
    assert stamp_key("2026-01-01T00:00:01Z") == stamp_key("2026-01-01T01:00:01+01:00")
    assert split_stamp("2026-01-01T00:00:01.123456789Z hello world") == (
        stamp_key("2026-01-01T00:00:01.123456789Z"),
        "hello world",
    )
    assert split_stamp("no stamp here") == (None, "no stamp here")


def test_cursor_skips_lines_already_emitted_even_with_equal_timestamps():
    cursor = LogCursor()
    first = cursor.session()
    assert [first(k) for k in (10, 20, 20)] == [True, True, True]
    again = cursor.session()  # a re-read from the same second returns the same three lines, then new ones
    assert [again(k) for k in (10, 20, 20, 20, 30)] == [False, False, False, True, True]
    assert (cursor.key, cursor.count) == (30, 1)


def test_a_read_taken_at_once_moves_the_cursor_as_line_by_line():
    """``Session.take`` (one read's lines at once) drops and counts what the line-by-line filter does, across
    reads split anywhere, also within lines that share a timestamp."""
    stamps = ["2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z", "2026-01-01T00:00:02.5Z"]
    keys = [0, 1, 1, 1, 2, 2]
    lines = [f"{stamps[k]} line {i}" for i, k in enumerate(keys)]
    for emitted in range(len(lines) + 1):
        for cut in range(len(lines) + 1):
            by_line, at_once = LogCursor(), LogCursor()
            first, before = by_line.session(), at_once.session()
            assert all(first(stamp_key(line.split(" ")[0])) for line in lines[:emitted])
            assert before.take(lines[:emitted]) == 0
            again, resumed = by_line.session(), at_once.session()  # a re-read from the start
            fresh = [line for line in lines if again(stamp_key(line.split(" ")[0]))]
            reads = [lines[:cut], lines[cut:]]
            taken = [line for read in reads for line in read[resumed.take(read) :]]
            assert fresh == lines[emitted:] == taken
            assert (at_once.key, at_once.count) == (by_line.key, by_line.count)


async def test_a_backlog_is_logged_in_records_of_many_lines_and_a_trickle_a_line_each(env):
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    backlog = [f"backlog {i:04d}" for i in range(2 * logs.RECORD_LINES)]
    cluster.logs.write("default", master, C, "".join(f"{line}\n" for line in backlog))
    records: list[str] = []
    run = Streaming(hook)
    run.streamer.emit = records.append
    await until(lambda: records and records[-1].endswith(backlog[-1]))
    assert "\n".join(records).split("\n") == [f"[master-0] {line}" for line in backlog]
    assert len(records) < len(backlog) / 10  # records of many lines
    assert max(record.count("\n") + 1 for record in records) <= logs.RECORD_LINES

    shown = len(records)
    cluster.logs.write("default", master, C, "one more\n")
    await until(lambda: len(records) > shown)
    await run.stop()
    assert records[shown:] == ["[master-0] one more"]


async def test_scripted_pytorchjob_with_a_crashing_worker(tmp_path, monkeypatch):
    """The real controller and scripted pod runtime: the worker crashes once and restarts in place."""
    worker_attempts = [{"exit_code": 1, "logs": ["w crashed"]}, {"logs": ["w working", "w done"]}]
    script = {
        "default": {"duration": 0.05},
        "Master": {"logs": ["m working", "m done"]},
        "Worker-0": {"attempts": worker_attempts},
    }
    template = {"spec": {"containers": [{"name": C, "image": "busybox"}]}}
    replica = {"replicas": 1, "restartPolicy": "OnFailure", "template": template}
    job = {
        "metadata": {"name": "job", "annotations": {"localkube.dev/script": json.dumps(script)}},
        "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": replica}},
    }
    options = {"runtime": "scripted", "controllers": None}
    async with cluster_and_hook(tmp_path, monkeypatch, **options) as (cluster, hook):
        await create_job(hook, PYTORCH, job, "default")
        run = Streaming(hook, replicas="all")
        await until(lambda: {"[master-0] m done", "[worker-0] w done"} <= set(run.lines))
        lines = await run.stop()
        worker = cluster.store.get(rtype(cluster, PODS), "default", "job-worker-0")
    assert worker["status"]["containerStatuses"][0]["restartCount"] == 1
    master_lines = [line for line in lines if line.startswith("[master-0]")]
    assert master_lines == ["[master-0] m working", "[master-0] m done"]
    worker_lines = [line for line in lines if line.startswith("[worker-0]")]
    assert worker_lines == ["[worker-0] w crashed", "[worker-0] w working", "[worker-0] w done"]


async def test_a_streamer_resumes_from_an_earlier_streamers_cursors(env):
    """What a trigger restarted by another triggerer does: it goes on after the last emitted line, also
    within lines that share a timestamp, and marks lines up to ``mark_until`` as possibly repeated."""
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    cluster.logs.write("default", master, C, "a\nb\nc\n")  # one timestamp for three lines
    first = Streaming(hook)
    await first.wait_for(3)
    first.task.cancel()  # killed: no final flush
    await asyncio.gather(first.task, return_exceptions=True)
    cursors = first.streamer.cursors()
    uid = cluster.store.get(rtype(cluster, PODS), "default", master)["metadata"]["uid"]
    assert list(cursors) == [uid] and cursors[uid][1] == 3

    cluster.logs.write("default", master, C, "d\n")
    stamp = split_stamp((await hook.read_log("default", master, C, timestamps=True)).splitlines()[-1])[0]
    cluster.logs.write("default", master, C, "e\n")
    second = Streaming(hook, resume=json.loads(json.dumps(cursors)), mark_until=stamp)
    await second.wait_for(2)
    assert await second.stop() == ["[master-0] (may repeat) d", "[master-0] e"]
    assert second.streamer.cursors()[uid][0] > cursors[uid][0]


async def test_lines_are_emitted_with_the_kubelet_time(env):
    cluster, hook = env
    master = add_pod(cluster, "Master", 0)
    cluster.logs.write("default", master, C, "a\n")
    records: list[tuple[str, str]] = []
    streamer = ReplicaLogStreamer(
        hook,
        PYTORCH,
        "default",
        "job",
        emit=lambda line, timestamp=None: records.append((line, timestamp)),
        hub=WatchHub(),
        pod_times=True,
    )
    await streamer.stop()
    text = await hook.read_log("default", master, C, timestamps=True)
    key = stamp_key(text.split(" ", 1)[0])
    assert key is not None
    assert records[-1:] == [("[master-0] a", stamp_text(key))]  # after the line saying what is followed
    assert stamp_text(key).endswith("Z") and len(stamp_text(key)) == len("2026-12-01T00:00:00.000000Z")


def follows(cluster: LocalKube, pod: str) -> bool:
    return any(r.query.get("follow") == "true" and r.status == 200 for r in log_requests(cluster, pod))


@pytest.mark.parametrize("job_known", [True, False], ids=["deciding-replica", "master-role-pods"])
async def test_past_max_streams_a_streamer_follows_only_the_deciding_replica_and_says_so(env, job_known):
    cluster, hook = env
    hub = WatchHub()
    other = add_pod(cluster, "Master", 0, job="other")
    cluster.store.create(
        rtype(cluster, PYTORCH.resource), "default", {**job_body("job"), "kind": "PyTorchJob"}
    )
    master, worker = add_pod(cluster, "Master", 0), add_pod(cluster, "Worker", 0)
    for pod, text in ((master, "m"), (worker, "w")):
        cluster.logs.write("default", pod, C, f"{text}\n")
    async with contextlib.AsyncExitStack() as stack:
        if job_known:  # as a trigger's waiter has it: the job in the hub's cache
            job_events = await stack.enter_async_context(
                hub.subscribe(hook, PYTORCH.resource, "default", name="job")
            )
            assert (await anext(job_events)).type == "ADDED"
        first = Streaming(hook, job="other", hub=hub, max_streams=1)
        await until(lambda: follows(cluster, other))  # the loop follows one pod: its limit
        run = Streaming(hook, hub=hub, replicas="all", max_streams=1)
        assert await run.wait_for(1) == ["[master-0] m"]
        which = "the Master replica" if job_known else "the master-role pods"
        assert run.notes[0] == (
            "This triggerer follows 1 replica logs, its limit (max_log_streams=1): streaming only "
            f"{which} of PyTorchJob default/job"
        )
        assert await run.stop() == ["[master-0] m"]
        await first.stop()
    assert log_requests(cluster, worker) == []  # neither followed nor read at the end


@pytest.mark.parametrize("job_watched", [True, False], ids=["job-in-the-hub", "job-read"])
async def test_the_deciding_replica_comes_from_the_hubs_job_when_it_has_it(env, job_watched):
    """A trigger's waiter watches its job through the hub: the streamer reads the deciding replica from there
    and sends no request of its own (a triggerer restarting with 1,000 jobs would send 1,000 GETs)."""
    cluster, hook = env
    hub = WatchHub()
    job = {**job_body("job"), "kind": "PyTorchJob"}
    job["spec"]["pytorchReplicaSpecs"]["Worker"] = job["spec"]["pytorchReplicaSpecs"]["Master"]
    cluster.store.create(rtype(cluster, PYTORCH.resource), "default", job)
    master, worker = add_pod(cluster, "Master", 0), add_pod(cluster, "Worker", 0)
    for pod, text in ((master, "m"), (worker, "w")):
        cluster.logs.write("default", pod, C, f"{text}\n")
    async with contextlib.AsyncExitStack() as stack:
        if job_watched:
            job_events = await stack.enter_async_context(
                hub.subscribe(hook, PYTORCH.resource, "default", name="job")
            )
            assert (await anext(job_events)).type == "ADDED"
        gets_before = len(requests_to(cluster, "pytorchjobs/job"))
        run = Streaming(hook, hub=hub, replicas="deciding")
        assert await run.wait_for(1) == ["[master-0] m"]
        assert await run.stop() == ["[master-0] m"]
    assert run.notes[0] == "Streaming the logs of the Master replicas of PyTorchJob default/job"
    assert len(requests_to(cluster, "pytorchjobs/job")) - gets_before == (0 if job_watched else 1)
    assert log_requests(cluster, worker) == []


async def test_below_max_streams_every_chosen_replica_is_followed(env):
    cluster, hook = env
    master, worker = add_pod(cluster, "Master", 0), add_pod(cluster, "Worker", 0)
    for pod, text in ((master, "m"), (worker, "w")):
        cluster.logs.write("default", pod, C, f"{text}\n")
    run = Streaming(hook, replicas="all", max_streams=2)
    await run.wait_for(2)
    await until(lambda: follows(cluster, master) and follows(cluster, worker))
    assert set(await run.stop()) == {"[master-0] m", "[worker-0] w"}
    assert run.notes == ["Streaming the logs of all replicas of PyTorchJob default/job"]


async def test_a_streamer_reaching_max_streams_itself_narrows_to_the_deciding_replica(env):
    cluster, hook = env
    master, worker = add_pod(cluster, "Master", 0), add_pod(cluster, "Worker", 0)  # listed in this order
    for pod, text in ((master, "m"), (worker, "w")):
        cluster.logs.write("default", pod, C, f"{text}\n")
    run = Streaming(hook, replicas="all", max_streams=1)
    assert await run.wait_for(1) == ["[master-0] m"]
    await until(lambda: len(run.notes) == 2)
    assert run.notes[1].startswith("This triggerer follows 1 replica logs, its limit (max_log_streams=1)")
    assert await run.stop() == ["[master-0] m"]
    assert log_requests(cluster, worker) == []


def pod_lists(cluster: LocalKube, since: int) -> list:
    """The LISTs of pods (not watches, not one pod's log) among the requests after ``since``."""
    return [
        r
        for r in cluster.requests[since:]
        if r.method == "GET" and r.path.endswith("/pods") and r.query.get("watch") != "true"
    ]


async def job_in_the_hub(cluster: LocalKube, hook: AsyncTrainingJobHook, stack: contextlib.AsyncExitStack):
    """A PyTorchJob of one Master and one Worker, held by a hub's job watch (as a trigger's waiter has it)."""
    hub = WatchHub()
    job = {**job_body("job"), "kind": "PyTorchJob"}
    job["spec"]["pytorchReplicaSpecs"]["Worker"] = job["spec"]["pytorchReplicaSpecs"]["Master"]
    cluster.store.create(rtype(cluster, PYTORCH.resource), "default", job)
    events = await stack.enter_async_context(hub.subscribe(hook, PYTORCH.resource, "default", name="job"))
    assert (await anext(events)).type == "ADDED"
    return hub


@pytest.mark.parametrize("replicas", ["deciding", "all"])
async def test_stop_lists_no_pods_when_every_chosen_pod_is_followed(env, replicas):
    """1,000 jobs ending together were 1,000 LISTs on the way to their events: not when the hub's pod events
    already showed every pod the job's status says its chosen replicas have."""
    cluster, hook = env
    async with contextlib.AsyncExitStack() as stack:
        hub = await job_in_the_hub(cluster, hook, stack)
        master, worker = add_pod(cluster, "Master", 0), add_pod(cluster, "Worker", 0)
        for pod, text in ((master, "m"), (worker, "w")):
            cluster.logs.write("default", pod, C, f"{text}\n")
        run = Streaming(hook, hub=hub, replicas=replicas)
        followed = [master] if replicas == "deciding" else [master, worker]
        await until(lambda: all(follows(cluster, pod) for pod in followed))
        await run.wait_for(len(followed))
        for pod, text in ((master, "m"), (worker, "w")):  # written after the last line the follows emitted
            cluster.logs.write("default", pod, C, f"{text} last\n")
        since = len(cluster.requests)
        lines = await run.stop()
    assert pod_lists(cluster, since) == []
    expected = {"[master-0] m", "[master-0] m last"}
    if replicas == "all":
        expected |= {"[worker-0] w", "[worker-0] w last"}
    assert sorted(lines) == sorted(expected)  # each line once: the final reads of the running pods


async def test_stop_lists_the_pods_when_one_was_not_seen_and_reads_it(env):
    """The hub's pod watch has not shown the worker yet (its watch is down): the one LIST finds it, and its
    log is read."""
    cluster, hook = env
    async with contextlib.AsyncExitStack() as stack:
        hub = await job_in_the_hub(cluster, hook, stack)
        master = add_pod(cluster, "Master", 0)
        cluster.logs.write("default", master, C, "m\n")
        run = Streaming(hook, hub=hub, replicas="all")
        await run.wait_for(1)
        held = cluster.faults.hold("no-pod-events", method="GET", path=r"/pods$")  # the next one
        cluster.faults.end_watches()
        await until(lambda: bool(held.arrived))  # the pod watch's resume waits: no pod event comes
        worker = add_pod(cluster, "Worker", 0)
        cluster.logs.write("default", worker, C, "w\n")
        assert run.streamer.pod_names == [master]
        since = len(cluster.requests)
        lines = await run.stop()
        held.open()
    assert len(pod_lists(cluster, since)) == 1
    assert sorted(lines) == ["[master-0] m", "[worker-0] w"]


async def test_a_backlog_is_handed_on_in_pieces_and_the_loop_runs_between_them(env, monkeypatch):
    """What ``benchmarks/loop_lag.py`` measures, without a clock: a pod's log of megabytes ready at once is
    taken from its stream a piece (what one read of the connection brought) at a time, and the loop's other
    callbacks run between the pieces. ``STEP_SECONDS`` 0: every step of the emit loop is over its time after
    one line, so the longest the loop is held is one take, whatever the machine's speed."""
    cluster, hook = env
    monkeypatch.setattr(log_follow, "STEP_SECONDS", 0.0)
    loop = asyncio.get_running_loop()
    ticks = 0
    ticking = True

    def tick() -> None:  # another trigger's callback, again as soon as the loop gets round to it
        nonlocal ticks
        ticks += 1
        if ticking:
            loop.call_soon(tick)

    takes: list[tuple[int, int]] = []  # (bytes taken, ticks) per take of the backlog
    read_lines = transport.LineStream.lines

    async def spy(stream: transport.LineStream) -> list[bytes] | None:
        lines = await read_lines(stream)
        if lines and b"backlog" in lines[0]:
            takes.append((sum(len(line) + 1 for line in lines), ticks))
        return lines

    monkeypatch.setattr(transport.LineStream, "lines", spy)
    master = add_pod(cluster, "Master", 0)
    count = 30_000  # some 3.5 MB with the timestamps
    cluster.logs.write("default", master, C, "".join(f"backlog {i:05d} {'x' * 80}\n" for i in range(count)))
    loop.call_soon(tick)
    try:
        run = Streaming(hook)
        await run.wait_for(count)
        await run.stop()
    finally:
        ticking = False
    assert run.lines == [f"[master-0] backlog {i:05d} {'x' * 80}" for i in range(count)]
    assert len(takes) > 4  # the backlog went on in pieces
    assert max(taken for taken, _ in takes) < sum(taken for taken, _ in takes) / 4
    assert all(before < after for (_, before), (_, after) in pairwise(takes))  # the loop ran between


async def test_a_follow_cancelled_as_its_pod_changes_ends():
    """A follow cancelled in the loop step its pod changes in (a wait that ends on a pod event: its streamer
    stops the follows as the same event wakes them) ends. ``asyncio.wait_for`` lost that cancel on Python
    3.11, and the stopping streamer then waited for ever for the follow."""
    pod_object = {"metadata": {"name": "job-worker-0", "uid": "u1"}, "status": {"phase": "Running"}}
    pod = FollowedPod("job-worker-0", "Worker", "worker-0", "main", pod_object, 0)
    follow = asyncio.create_task(pod.wait_change(60))
    await asyncio.sleep(0)  # it waits for a change

    pod.update(pod_object)
    follow.cancel()

    with pytest.raises(asyncio.CancelledError):
        await follow


def in_back_off(cluster: LocalKube, name: str) -> dict:
    """The pod as the watch brings it once its container exited 1 and waits to restart (CrashLoopBackOff)."""
    pod = cluster.store.get(rtype(cluster, PODS), "default", name)
    container = {
        "name": C,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        "restartCount": 1,
    }
    return {**pod, "status": {"phase": "Running", "containerStatuses": [container]}}


async def test_a_follow_stopped_as_its_pod_goes_into_back_off_ends(env):
    """Issue 27: an MXJob whose deciding replica exits 1 and restarts in place. Its stream ended with the
    container; the follow waits for the pod watch (with a timeout) when the back-off arrives and the follows
    are cancelled in the same step (the job's failure ends the wait). ``asyncio.wait_for`` on Python 3.11
    then returned normally, the cancellation lost: the follow went on to wait for the pod's next change,
    which never came, and stop() waited for it forever."""
    cluster, _ = env
    master, run = await following_master(*env, "exit 1", retry_interval=300)
    pod = run.streamer._pods[master]
    cluster.logs.close_container("default", master, C)
    await until(lambda: pod.waiter is not None)  # the gate: the follow waits for the watch, with a timeout
    follow = pod.task
    assert follow is not None
    cancel_followers = run.streamer._cancel_followers

    async def back_off_then_cancel() -> None:
        run.streamer._on_pod("MODIFIED", in_back_off(cluster, master))  # the watch's event, this very step
        await cancel_followers()

    run.streamer._cancel_followers = back_off_then_cancel  # type: ignore[method-assign]

    await asyncio.wait_for(run.streamer.stop(), 60)  # a guard against the hang, not a timing

    await run.task
    assert follow.cancelled()
    assert run.lines == ["[master-0] exit 1"]


async def test_a_follow_that_does_not_end_when_stopped_is_left_behind(env, monkeypatch, caplog):
    """Whatever a follow does, stop() returns: one that has not ended FOLLOW_STOP_SECONDS after it was
    cancelled is left behind, with a warning and a note of the gap."""
    cluster, _ = env
    entered, release = deaf_follows(monkeypatch)
    monkeypatch.setattr(logs, "FOLLOW_STOP_SECONDS", 0.05)
    master, run = await following_master(*env, "exit 1", retry_interval=300)
    pod = run.streamer._pods[master]
    cluster.logs.close_container("default", master, C)
    await entered.wait()  # the gate: the follow is in the wait that will not end
    follow = pod.task
    assert follow is not None
    try:
        with caplog.at_level(logging.WARNING, logger=logs.__name__):
            gaps = await asyncio.wait_for(run.streamer.stop(), 60)  # a guard against the hang, no timing

        await run.task
        assert not follow.done()  # left behind
        assert gaps == [
            "the log follow of master-0 did not end within 0.05 s of being stopped; its last lines may be "
            "missing"
        ]
        assert "The log follow of master-0 did not end when stopped; left behind" in caplog.messages
    finally:
        release.set()
        await asyncio.gather(follow, return_exceptions=True)
