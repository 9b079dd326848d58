"""The server side of ``scale.py``: localkube with chatty replicas that stay Running, and timed requests.

Nothing here changes localkube: the runtime is a subclass of its scripted runtime passed in as a worker, and
the request log is a list that stamps each append. When each job's terminal status is written is
``trigger_load.StatusClock``'s business (``perf_counter`` is ``CLOCK_MONOTONIC`` too, on Linux).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import random
import time
from typing import Any

from localkube.cluster import LocalKube
from localkube.runtime.kubelet import PodInstance, RunResult
from localkube.runtime.scripted import ScriptedRuntime
from scale_manifest import job_manifest
from trigger_load import KIND, NAMESPACE

JOB_LABEL = "training.kubeflow.org/job-name"


class TimedRequests(list):
    """``LocalKube.requests`` that also notes when each request arrived (``time.monotonic()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def append(self, record: Any) -> None:
        self.times.append(time.monotonic())
        super().append(record)

    def between(self, start: float, end: float) -> list[tuple[float, Any]]:
        """The (arrival time, record) pairs that arrived in ``[start, end)``."""
        first, last = bisect.bisect_left(self.times, start), bisect.bisect_left(self.times, end)
        return list(zip(self.times[first:last], self[first:last], strict=True))


class _Chatty:
    """A container that logs a line every ``every`` seconds (from a random phase) until its job is ended."""

    def __init__(self, runtime: ChattyRuntime, inst: PodInstance, container: str, end: asyncio.Event) -> None:
        self.runtime, self.inst, self.container, self.end = runtime, inst, container, end

    async def wait(self) -> RunResult:
        self.runtime.running += 1  # the kubelet published the container Running just before this
        every = self.runtime.log_every
        step = 0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.end.wait(), random.uniform(0, every))
        while not self.end.is_set():
            step += 1
            self.runtime.write_log(self.inst, self.container, f"step {step} loss {1 / step:.4f}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.end.wait(), every)
        return RunResult(0)


class ChattyRuntime(ScriptedRuntime):
    """The scripted runtime, but every container runs (and logs) until :meth:`finish` names its job."""

    def __init__(self, log_every: float) -> None:
        super().__init__()
        self.log_every = log_every
        self.ends: dict[str, asyncio.Event] = {}
        self.running = 0  # containers that started (a store LIST to count them copies every pod)

    def _end_of(self, job: str) -> asyncio.Event:
        return self.ends.setdefault(job, asyncio.Event())

    async def launch(self, inst: PodInstance, container: dict, attempt: int, *, init: bool) -> Any:
        job = inst.labels.get(JOB_LABEL)
        if init or job is None:
            return await super().launch(inst, container, attempt, init=init)
        return _Chatty(self, inst, container["name"], self._end_of(job))

    def finish(self, jobs: list[str]) -> None:
        """End every container of these jobs with exit code 0 (call on the cluster's loop)."""
        for job in jobs:
            self._end_of(job).set()


def job_type(cluster: LocalKube) -> Any:
    return cluster.store.resource_type(KIND.resource.group, KIND.resource.version, KIND.resource.plural)


def start_cluster(log_every: float) -> tuple[LocalKube, ChattyRuntime]:
    """A fresh localkube (the Kubeflow controller, the chatty runtime) on its own loop in a thread of this
    process. The other kinds' controllers are left out: each subscribes to every store change (a deep copy of
    every object written), which made creating 1,000 jobs take minutes and would load the machine."""
    from localkube.controllers.kubeflow import KubeflowController

    runtime = ChattyRuntime(log_every)
    cluster = LocalKube(runtime=None, controllers=[KubeflowController(), runtime])
    cluster.requests = TimedRequests()
    cluster.start_in_thread()
    return cluster, runtime


def create_jobs(cluster: LocalKube, names: list[str]) -> None:
    rt = job_type(cluster)

    def create_all() -> None:
        for name in names:
            cluster.store.create(rt, NAMESPACE, job_manifest(name))

    cluster.call(create_all)
