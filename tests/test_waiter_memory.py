"""What a waiting job keeps in a triggerer: the JobWaiter holds the watch hub's own packed records of its job
and pods (no dicts of its own), and what it reads from them is the object as the hub's subscribers see it.

A controller-less localkube: the test writes the job's and the pod's states itself.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from airflow_provider_training.kinds.base import PODS
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.slim import Packed
from airflow_provider_training.waiting import JobWaiter, WaitOptions
from airflow_provider_training.watch import WatchHub
from tests.hooks.kube_env import cluster_and_hook, job_body, pod_manifest, rtype, set_pod_state, until

pytestmark = pytest.mark.timeout(60)
PYTORCH = get_kind("PyTorchJob")
POD = "kept-master-0"


class TaskLog:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: object, **fields: object) -> None:
        self.lines.append(message % args if args else message)

    warning = error = exception = info


def set_job(cluster, state: str, message: str = "") -> None:
    counts = {"active": 1} if state == "Running" else {"succeeded": 1}
    condition = {"type": state, "status": "True", "reason": f"PyTorchJob{state}", "message": message or state}
    conditions = [condition]
    status = {"conditions": conditions, "replicaStatuses": {"Master": counts}}
    cluster.store.update_status(rtype(cluster, PYTORCH.resource), "default", "kept", status)


def record(hub: WatchHub, plural: str, name: str) -> Packed | None:
    """The hub's record of one object, from whichever of its watches of ``plural`` holds it."""
    for watch in hub._watches.values():
        if watch.resource.plural == plural and name in watch.objects:
            return watch.objects[name]
    return None


async def test_a_waiter_holds_the_hubs_records_not_dicts_of_its_own(tmp_path: Path, monkeypatch) -> None:
    async with cluster_and_hook(tmp_path, monkeypatch) as (cluster, hook):
        body = {**job_body("kept"), "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}
        cluster.store.create(rtype(cluster, PYTORCH.resource), "default", body)
        set_job(cluster, "Running")
        pod = pod_manifest(PYTORCH, "kept", "Master", 0)
        cluster.store.create(rtype(cluster, PODS), "default", pod)
        set_pod_state(cluster, pod, "Running", "running")
        options = WaitOptions(deadline=datetime.now(UTC) + timedelta(seconds=50), get_logs=False)
        task_log = TaskLog()
        waiter = JobWaiter(hook, PYTORCH, "kept", "default", options, task_log)
        waiting = asyncio.create_task(waiter.wait())
        await until(lambda: POD in waiter.seen_pods and waiter.status is not None)
        hub = WatchHub.shared()

        assert waiter._job is record(hub, "pytorchjobs", "kept")
        assert waiter.seen_pods[POD] is record(hub, "pods", POD)
        assert waiter.job == hub.cached(hook, PYTORCH.resource, "default", "kept")
        assert waiter.job["status"]["conditions"][0]["type"] == "Running"
        before = waiter._job
        set_job(cluster, "Running", "step 2")  # a new state of the job: the waiter follows the hub's record
        await until(lambda: waiter._job is not before)
        assert waiter._job is record(hub, "pytorchjobs", "kept")
        assert waiter.job["status"]["conditions"][0]["message"] == "step 2"
        set_job(cluster, "Succeeded")
        event = await waiting

    assert event.succeeded and event.pods == [POD]
    assert "PyTorchJob default/kept is Succeeded" in event.message


def frames_of_ours(task: asyncio.Task) -> list[str]:
    """The provider's coroutines suspended in a task, outermost first (following what each awaits)."""
    found, awaited = [], task.get_coro()
    while (code := getattr(awaited, "cr_code", None)) is not None:
        if "airflow_provider_training" in code.co_filename:
            found.append(f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}")
        awaited = awaited.cr_await
    return found


async def test_a_waiting_job_is_one_suspended_frame(tmp_path: Path, monkeypatch) -> None:
    """Between events a wait is one coroutine frame, not a chain of them (each suspended coroutine is a few
    hundred bytes per deferred task in a triggerer), and it keeps no container it has nothing for."""
    async with cluster_and_hook(tmp_path, monkeypatch) as (cluster, hook):
        body = {**job_body("kept"), "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}
        cluster.store.create(rtype(cluster, PYTORCH.resource), "default", body)
        set_job(cluster, "Running")
        options = WaitOptions(deadline=datetime.now(UTC) + timedelta(seconds=50), get_logs=False)
        waiter = JobWaiter(hook, PYTORCH, "kept", "default", options, TaskLog())
        waiting = asyncio.create_task(waiter.wait())
        await until(lambda: waiter.status is not None)
        await asyncio.sleep(0)  # back to waiting for the next event

        assert frames_of_ours(waiting) == ["waiting.py:wait"]
        assert not hasattr(waiter, "__dict__")  # slots
        assert waiter._notes is None and waiter._warned is None
        set_job(cluster, "Succeeded")
        event = await waiting

    assert event.succeeded and event.notes == []
