"""N concurrent TrainingJobTriggers on one event loop versus per-job polling, against localkube.

For each size N (``--small`` and ``--jobs``) and each way of waiting, N PyTorchJobs are created up front in a
fresh localkube (Kubeflow controller, scripted pod runtime) with timelines that end them one after another
while everyone waits; then N waiters run concurrently on one event loop, as a triggerer runs its triggers:

- ``watch hub``: N ``TrainingJobTrigger``s (no log streaming), sharing the process's watch hub;
- ``polling``: N waiters that each GET their job every ``--poll-interval`` seconds (first poll at a random
  offset, as independently deferred tasks are), as the Kubeflow SDK and typical hand-written triggers do.
  They share one API client, which spares the baseline N clients' set-up and connections.

Figures: API requests per minute over the waiting window (every request localkube answered); the most watches
open at once (the hub's count, checked against the watch requests the server saw); the latency from the
moment the controller wrote a job's terminal status (recorded by a localkube store subscription, on the
cluster's loop, at the write) to the waiter's event, as median and p99.

    python benchmarks/trigger_load.py [--jobs 200] [--small 50] [--poll-interval 2]

localkube runs on its own loop in a thread of this process (the store subscription needs it in-process), so
it shares the interpreter with the waiters: the latencies include that contention on both sides alike.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localkube.cluster import LocalKube
from localkube.pytest_plugin import connection_json

from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.triggers.training import TrainingJobTrigger
from airflow_provider_training.watch import WatchHub

CONN_ID = "trigger_load"
NAMESPACE = "default"
KIND = get_kind("PyTorchJob")
TERMINAL = ("Succeeded", "Failed")
QUIET = logging.getLogger("trigger_load.triggers")
QUIET.setLevel(logging.WARNING)


@dataclass
class Run:
    """What one (mode, N) run measured."""

    mode: str
    jobs: int
    window: float = 0.0  # seconds from the first waiter starting to the last event
    requests: int = 0  # API requests localkube answered within the window
    watches_open: int = 0  # the most watches open at once
    watch_requests: int = 0  # watch requests the server saw within the window
    latencies: list[float] = field(default_factory=list)  # seconds, terminal status write -> event
    events: dict[str, int] = field(default_factory=dict)  # event status -> count
    ended_before_waiting: int = 0  # jobs already finished when their waiter started (no latency)

    @property
    def per_minute(self) -> float:
        return self.requests / self.window * 60 if self.window else 0.0


def job_manifest(name: str, seconds: float) -> dict[str, Any]:
    """A one-replica PyTorchJob whose master runs ``seconds`` under the scripted runtime, then succeeds."""
    script = {"Master": {"duration": seconds, "logs": [f"{name} training"], "exit_code": 0}}
    template = {"spec": {"containers": [{"name": KIND.default_container, "image": "busybox"}]}}
    return {
        "apiVersion": KIND.api_version,
        "kind": KIND.kind,
        "metadata": {"name": name, "annotations": {"localkube.dev/script": json.dumps(script)}},
        "spec": {
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}
        },
    }


def terminal(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") in TERMINAL and c.get("status") == "True" for c in conditions)


class StatusClock:
    """When each job's terminal status was written, from a store subscription on the cluster's loop."""

    def __init__(self, cluster: LocalKube) -> None:
        self.cluster = cluster
        self.written: dict[str, float] = {}
        self.ready = asyncio.Event()
        assert cluster.loop is not None
        self.task = asyncio.run_coroutine_threadsafe(self._follow(), cluster.loop)

    async def _follow(self) -> None:
        rt = self.cluster.store.resource_type(
            KIND.resource.group, KIND.resource.version, KIND.resource.plural
        )
        with self.cluster.store.subscribe(rt, NAMESPACE) as events:
            self.ready.set()
            async for event in events:
                name = event.object["metadata"]["name"]
                if name not in self.written and terminal(event.object):
                    self.written[name] = time.perf_counter()

    def stop(self) -> None:
        self.task.cancel()


async def wait_with_trigger(name: str) -> str:
    trigger = TrainingJobTrigger(
        kind=KIND.kind,
        api_version=KIND.api_version,
        job_name=name,
        namespace=NAMESPACE,
        kubernetes_conn_id=CONN_ID,
        get_logs=False,
    )
    # A triggerer sends the trigger's log to the task log; here its state changes would flood stdout.
    trigger._log = QUIET  # type: ignore[assignment]
    events: Any = trigger.run()  # the async generator a triggerer drives (typed as an AsyncIterator)
    try:
        event = await anext(events)
    finally:
        await events.aclose()
    return str(event.payload["status"])


async def wait_by_polling(name: str, hook: AsyncTrainingJobHook, interval: float) -> str:
    """What a per-job polling trigger does: GET the job every ``interval`` s until its status is terminal."""
    await asyncio.sleep(random.uniform(0, interval))
    while True:
        job = await hook.get_job(KIND, name, NAMESPACE)
        if job is None:
            return "deleted"
        state = KIND.read_status(job, {}).state
        if state.terminal:
            return "success" if state.value == "Succeeded" else "failed"
        await asyncio.sleep(interval)


async def measure(
    mode: str, jobs: int, waiter: Callable[[str], Awaitable[str]], args: argparse.Namespace, workdir: Path
) -> Run:
    run = Run(mode, jobs)
    cluster = LocalKube(runtime="scripted").start_in_thread()
    try:
        kubeconfig = cluster.write_kubeconfig(workdir / f"{mode}-{jobs}.kubeconfig")
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = connection_json(kubeconfig, NAMESPACE)
        clock = StatusClock(cluster)
        rt = cluster.store.resource_type(KIND.resource.group, KIND.resource.version, KIND.resource.plural)
        names = [f"load-{i:04d}" for i in range(jobs)]
        for i, name in enumerate(names):  # they end one after another, spread over the window
            seconds = args.first_end + args.spread * i / max(jobs - 1, 1)
            cluster.call(cluster.store.create, rt, NAMESPACE, job_manifest(name, seconds))
        hub = WatchHub.shared()
        already_open = hub.stats.active_watches
        first_request = len(cluster.requests)
        began = time.perf_counter()
        ended: dict[str, float] = {}

        async def one(name: str) -> None:
            started = time.perf_counter()
            status = await waiter(name)
            ended[name] = time.perf_counter()
            run.events[status] = run.events.get(status, 0) + 1
            written = clock.written.get(name)
            if written is None or written < started:
                run.ended_before_waiting += 1
            else:
                run.latencies.append(ended[name] - written)

        async def sample_watches() -> None:
            while True:
                run.watches_open = max(run.watches_open, hub.stats.active_watches - already_open)
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample_watches())
        try:
            limit = args.first_end + args.spread + 60
            await asyncio.wait_for(asyncio.gather(*(one(name) for name in names)), limit)
        finally:
            sampler.cancel()
        run.window = max(ended.values()) - began
        window = cluster.requests[first_request:]
        run.requests = len(window)
        run.watch_requests = sum(1 for r in window if r.query.get("watch", "").lower() == "true")
        clock.stop()
    finally:
        cluster.stop_thread()
    return run


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def report(runs: list[Run], poll_interval: float) -> None:
    header = (
        f"{'waiting by':<28} {'N':>4} {'window s':>8} {'requests':>8} {'req/min':>8} "
        f"{'watches':>7} {'median ms':>9} {'p99 ms':>8}  events"
    )
    print(header)
    print("-" * len(header))
    for run in runs:
        label = run.mode if run.mode == "watch hub" else f"polling every {poll_interval:g}s"
        events = ", ".join(f"{k} {v}" for k, v in sorted(run.events.items()))
        if run.ended_before_waiting:
            events += f" ({run.ended_before_waiting} ended before waiting)"
        print(
            f"{label:<28} {run.jobs:>4} {run.window:>8.1f} {run.requests:>8} {run.per_minute:>8.0f} "
            f"{run.watches_open:>7} {statistics.median(run.latencies) * 1000:>9.0f} "
            f"{percentile(run.latencies, 0.99) * 1000:>8.0f}  {events}"
        )
    hub_runs = [r for r in runs if r.mode == "watch hub"]
    print(
        "watch requests the server saw (hub): "
        + ", ".join(f"N={r.jobs}: {r.watch_requests}" for r in hub_runs)
        + " (a job watch and a pod watch, shared by every trigger)"
    )


async def main_async(args: argparse.Namespace) -> list[Run]:
    runs = []
    sizes = sorted({n for n in (args.small, args.jobs) if n > 0})
    with tempfile.TemporaryDirectory(prefix="trigger-load-") as tmp:
        for jobs in sizes:
            runs.append(await measure("watch hub", jobs, wait_with_trigger, args, Path(tmp)))
            # The pollers share one client (one connection pool): the baseline's most favourable set-up.
            hook = AsyncTrainingJobHook(CONN_ID)
            try:
                poll = functools.partial(wait_by_polling, hook=hook, interval=args.poll_interval)
                runs.append(await measure("polling", jobs, poll, args, Path(tmp)))
            finally:
                await hook.close()
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="concurrent waiters and jobs (default 200)")
    parser.add_argument("--small", type=int, default=50, help="a smaller N to compare with (0: skip)")
    parser.add_argument("--poll-interval", type=float, default=2.0, help="the baseline's GET interval (s)")
    parser.add_argument("--first-end", type=float, default=5.0, help="when the first job ends (s)")
    parser.add_argument("--spread", type=float, default=10.0, help="the jobs end over this many seconds")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    random.seed(args.seed)
    logging.basicConfig(level=logging.WARNING)
    report(asyncio.run(main_async(args)), args.poll_interval)


if __name__ == "__main__":
    main()
