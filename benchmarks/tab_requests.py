"""Kubernetes API requests per minute that open Training tabs cost while a job runs, against localkube.

A PyTorchJob (master and worker) runs for the whole window, its master writing a log line a second. Each
simulated tab does what the React app does against ``/training/api`` (docs/ui-tab.md): it asks for the job
view every ``refresh_seconds`` (each ask goes through the api-server's shared snapshot cache, as
``GET /training/api/job`` does) and keeps one log stream of the master open
(``GET /training/api/logs/stream``: a catch-up read, then the pod's shared follow). The tabs start at random
offsets within one period, as users open them. The api-server's database reads are left out: they cost no
Kubernetes request.

Figures: every request localkube answered during the window, per minute, by kind of request, for 1 tab and
for ``--tabs`` tabs on the same job; the second shows the load does not grow with the viewers.

    python benchmarks/tab_requests.py [--seconds 60] [--tabs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import tempfile
import time
from pathlib import Path

from localkube.cluster import LocalKube
from localkube.faults import resource_of

from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.jobs import create_job
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.logs import container_name
from airflow_provider_training.plugins import ui_cluster, ui_logs
from airflow_provider_training.testing import connection_json, scripted_job

NAMESPACE = "default"
KIND = get_kind("PyTorchJob")
GATE = "tab-requests-master"
SCRIPT = {
    "default": {"duration": None, "logs": ["up"]},
    "Master": {"duration": 0, "logs": ["up"], "gate": GATE},
}


async def tab(hook: AsyncTrainingJobHook, job: dict, until: float) -> None:
    """One open tab: the job view every refresh, and the master's log stream."""
    meta = job["metadata"]
    key = ("bench", KIND.kind, KIND.api_version, NAMESPACE, meta["name"], meta["uid"])

    def read() -> asyncio.Future:
        return ui_cluster.read_snapshot(hook, KIND, meta["name"], NAMESPACE, meta["uid"])

    await asyncio.sleep(random.uniform(0, ui_cluster.REFRESH_SECONDS))
    snapshot = await ui_cluster.SNAPSHOTS.get(key, read)
    master = next(p for p in snapshot.pods if "-master-" in p["metadata"]["name"])
    pod = master["metadata"]
    lines = ui_logs.stream(
        hook, NAMESPACE, pod["name"], pod["uid"], container_name(master, KIND.default_container), None, 200
    )

    async def follow() -> None:
        async for _ in lines:
            pass

    streaming = asyncio.create_task(follow())
    try:
        while time.monotonic() < until:
            await asyncio.sleep(ui_cluster.REFRESH_SECONDS)
            await ui_cluster.SNAPSHOTS.get(key, read)
    finally:
        streaming.cancel()
        await asyncio.gather(streaming, return_exceptions=True)


async def measure(kube: LocalKube, hook: AsyncTrainingJobHook, tabs: int, seconds: float) -> dict[str, float]:
    from localkube.runtime import close_gate

    close_gate(GATE)
    name = f"tab-requests-{tabs}"
    manifest = scripted_job("PyTorchJob", SCRIPT, {"Master": 1, "Worker": 1})
    manifest["metadata"]["name"] = name
    job = await create_job(hook, KIND, manifest, NAMESPACE)
    while not any(
        (p.get("status") or {}).get("phase") == "Running"
        for p in await hook.list_job_pods(KIND, name, NAMESPACE)
        if "-master-" in p["metadata"]["name"]
    ):
        await asyncio.sleep(0.1)
    master = f"{name}-master-0"
    writer = asyncio.create_task(write_lines(kube, master))
    start = len(kube.requests)
    began = time.monotonic()
    await asyncio.gather(*(tab(hook, job, began + seconds) for _ in range(tabs)))
    elapsed = time.monotonic() - began
    writer.cancel()
    counts = collections.Counter(_kind_of(r.path, r.query) for r in kube.requests[start:])
    return {k: round(v * 60 / elapsed, 1) for k, v in sorted(counts.items())} | {
        "total": round(sum(counts.values()) * 60 / elapsed, 1)
    }


async def write_lines(kube: LocalKube, pod: str) -> None:
    step = 0
    while True:
        await asyncio.sleep(1.0)
        step += 1
        kube.logs.write(NAMESPACE, pod, "pytorch", f"step {step}")


def _kind_of(path: str, query: dict[str, str]) -> str:
    """``pytorchjobs``, ``pods``, ``events``, ``pods/log follow`` or ``pods/log read``."""
    if path.endswith("/log"):
        return "pods/log " + ("follow" if query.get("follow") == "true" else "read")
    return resource_of(path) or path


async def main(seconds: float, tabs: int) -> None:
    async with LocalKube(runtime="scripted") as kube:
        with tempfile.TemporaryDirectory() as tmp:
            path = kube.write_kubeconfig(Path(tmp) / "kubeconfig")
            os.environ["AIRFLOW_CONN_TAB_REQUESTS"] = connection_json(path)
            hook = AsyncTrainingJobHook("tab_requests")
            try:
                for n in (1, tabs):
                    figures = await measure(kube, hook, n, seconds)
                    print(json.dumps({"tabs": n, "seconds": seconds, "requests_per_minute": figures}))
            finally:
                await hook.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--tabs", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.seconds, args.tabs))
