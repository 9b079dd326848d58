"""No silent loss at the end of a wait: the final log read retries like every other read until the deadline,
and what truly cannot be read (the pod is gone) is named in the task log.

The test writes the job, its pod and the pod's log into a controller-less localkube and moves them on only
when the wait has reached the point under test (the requests it sent say so): no step bets on timing.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_provider_training import logs
from airflow_provider_training import waiting as waiting_module
from airflow_provider_training.kinds.base import PODS
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.waiting import JobWaiter, WaitOptions
from tests.hooks.kube_env import cluster_and_hook, deaf_follows, pod_manifest, rtype, set_pod_state, until

pytestmark = pytest.mark.timeout(60)
PYTORCH = get_kind("PyTorchJob")
C = PYTORCH.default_container
POD = "flushed-master-0"
RETRIES = 8  # more failed reads in a row than the hook's policy has attempts (4)


class TaskLog:
    """The wait's task log."""

    def __init__(self) -> None:
        self.infos: list[str] = []
        self.warnings: list[str] = []

    def info(self, message: str, *args: object, **fields: object) -> None:  # fields: e.g. timestamp=
        self.infos.extend((message % args if args else message).split("\n"))  # a record: a read's lines

    def warning(self, message: str, *args: object) -> None:
        self.warnings.append(message % args if args else message)

    error = exception = warning


def condition(type_: str) -> dict:
    return {"type": type_, "status": "True", "reason": f"PyTorchJob{type_}", "message": type_}


def set_job(cluster, state: str) -> None:
    counts = {"active": 1} if state == "Running" else {"succeeded": 1}
    status = {"conditions": [condition("Created"), condition(state)], "replicaStatuses": {"Master": counts}}
    cluster.store.update_status(rtype(cluster, PYTORCH.resource), "default", "flushed", status)


def log_reads(cluster, since: int, *, follow: bool) -> list:
    return [
        r
        for r in cluster.requests[since:]
        if r.path.endswith(f"/{POD}/log") and (r.query.get("follow") == "true") == follow
    ]


def watch_open(cluster, since: int, plural: str) -> bool:
    return any(
        r.path.endswith(f"/{plural}") and r.query.get("watch") == "true" and r.status == 200
        for r in cluster.requests[since:]
    )


def streaming(cluster, hook, *, unseen_worker: bool = False) -> tuple[JobWaiter, TaskLog]:
    """A running job whose master wrote 10 lines, and a waiter for it (``unseen_worker``: as below)."""
    specs = {"Master": {"replicas": 1}, **({"Worker": {"replicas": 1}} if unseen_worker else {})}
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "flushed"},
        "spec": {"pytorchReplicaSpecs": specs},
    }
    cluster.store.create(rtype(cluster, PYTORCH.resource), "default", body)
    set_job(cluster, "Running")
    pod = pod_manifest(PYTORCH, "flushed", "Master", 0)
    cluster.store.create(rtype(cluster, PODS), "default", pod)
    set_pod_state(cluster, pod, "Running", "running")
    cluster.logs.start_container("default", POD, C)
    for i in range(1, 11):
        cluster.logs.write("default", POD, C, f"line {i}\n")
    task_log = TaskLog()
    options = WaitOptions(
        deadline=datetime.now(UTC) + timedelta(seconds=50),
        check_interval=0.1,
        log_replicas="all" if unseen_worker else "master",
    )
    return JobWaiter(hook, PYTORCH, "flushed", "default", options, task_log), task_log


async def streaming_then_cut(cluster, hook, *, unseen_worker: bool = False) -> tuple[asyncio.Task, TaskLog]:
    """A wait streaming the master's first 10 lines, then its log stream cut and every re-read dropped.
    ``unseen_worker``: every replica followed, and the job has a Worker whose pod no watch has shown yet, so
    the final flush lists the job's pods (with every chosen pod followed it lists none)."""
    waiter, task_log = streaming(cluster, hook, unseen_worker=unseen_worker)
    waiting = asyncio.create_task(waiter.wait())
    await until(lambda: "[master-0] line 10" in task_log.infos)

    cluster.faults.drop(count=None, path=r"/log$")
    since = len(cluster.requests)
    await cluster.faults.restart()  # the open log stream (and the watches) are cut
    await until(lambda: bool(log_reads(cluster, since, follow=True)))  # the follower's re-open was dropped
    await until(lambda: all(watch_open(cluster, since, p) for p in ("pods", "pytorchjobs")))
    for i in range(11, 21):
        cluster.logs.write("default", POD, C, f"line {i}\n")
    return waiting, task_log


def emitted(task_log: TaskLog) -> list[str]:
    return [line for line in task_log.infos if line.startswith("[master-0] ")]


async def test_the_final_read_retries_until_it_gets_every_line(tmp_path: Path, monkeypatch) -> None:
    async with cluster_and_hook(tmp_path, monkeypatch) as (cluster, hook):
        waiting, task_log = await streaming_then_cut(cluster, hook, unseen_worker=True)
        cluster.logs.close_container("default", POD, C)
        pod = cluster.store.get(rtype(cluster, PODS), "default", POD)
        set_pod_state(cluster, pod, "Succeeded", "terminated")
        listing = cluster.faults.throttle(count=RETRIES, retry_after=0, method="GET", path=r"/pods$")
        since = len(cluster.requests)
        set_job(cluster, "Succeeded")  # the wait ends: its final flush meets the faults
        await until(lambda: len(log_reads(cluster, since, follow=False)) >= RETRIES)
        cluster.faults.clear()  # the API server recovers, long after the hook's attempts are used up
        event = (await waiting).to_payload()

    assert event["status"] == "success"
    assert listing.hits == RETRIES  # the flush's pod LIST was retried too
    assert emitted(task_log) == [f"[master-0] line {i}" for i in range(1, 21)]  # each line once
    assert not [w for w in task_log.warnings if "could not be read" in w]


async def test_lines_of_a_deleted_pod_are_named_as_lost(tmp_path: Path, monkeypatch) -> None:
    async with cluster_and_hook(tmp_path, monkeypatch) as (cluster, hook):
        waiting, task_log = await streaming_then_cut(cluster, hook)
        cluster.store.delete(rtype(cluster, PODS), "default", POD)  # cleanPodPolicy: All
        cluster.logs.forget_pod("default", POD)
        cluster.faults.clear()
        set_job(cluster, "Succeeded")
        event = (await waiting).to_payload()

    assert event["status"] == "success"
    assert emitted(task_log) == [f"[master-0] line {i}" for i in range(1, 11)]
    assert (
        "PyTorchJob default/flushed: the rest of master-0's log could not be read: the pod was deleted"
        in task_log.warnings
    )


async def test_the_deadline_ends_a_wait_whose_log_follow_does_not_stop(tmp_path: Path, monkeypatch) -> None:
    """Issue 27: the job ended, and stopping its log streams waits for a follow that does not end (here one
    that swallows its cancellation, and is never left behind: FOLLOW_STOP_SECONDS is an hour). The deadline
    still ends the wait: a sync task ends, a trigger fires."""
    entered, release = deaf_follows(monkeypatch)
    monkeypatch.setattr(logs, "FOLLOW_STOP_SECONDS", 3600.0)
    monkeypatch.setattr(waiting_module, "STOP_GRACE", 0.05)
    async with cluster_and_hook(tmp_path, monkeypatch) as (cluster, hook):
        waiter, task_log = streaming(cluster, hook)
        waiting = asyncio.create_task(waiter.wait())
        await until(lambda: "[master-0] line 10" in task_log.infos)
        cluster.logs.close_container("default", POD, C)  # the stream ends; the follow waits for the watch
        await entered.wait()  # the gate: in the wait that will not end
        follow = waiter.streamer._pods[POD].task  # type: ignore[union-attr]
        waiter.opts = replace(waiter.opts, deadline=datetime.now(UTC))  # the deadline passes
        try:
            event = (await asyncio.wait_for(waiting, 60)).to_payload()  # a guard against the hang
        finally:
            release.set()
            await asyncio.gather(follow, return_exceptions=True)

    assert event["status"] == "timeout"
    assert "PyTorchJob default/flushed: the deadline passed while the last replica log lines were read" in (
        task_log.warnings
    )
