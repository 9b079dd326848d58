"""A triggerer in a shared namespace: N waiting PyTorchJobs next to 2,000 unrelated pods, with the scoped
watch hub (this tree) and, as the baseline, the unscoped one (the provider at a git revision, default d00515f,
extracted with ``git archive`` and put first on the trigger process's PYTHONPATH).

One localkube (the Kubeflow controller, scripted runtime) runs in a thread of this process. It gets
``--unrelated`` pods of other workloads (Deployment-style pods of a few KB: labels, env, probes, volumes; they
stay Running) and ``--jobs`` PyTorchJobs (a Master and a Worker each, Running until the end). Then, for each
hub in turn and ``--rounds`` times, a fresh trigger process (this file with ``--child``) builds N
``TrainingJobTrigger(get_logs=False)``, reads its RSS, runs them on one loop until the hub's watches have
listed, and samples its RSS for ``--window`` seconds while the other workloads' pods change ``--churn`` times
a second (an annotation, as a status update or a rollout would). It reports the RSS, its peak (VmHWM), the CPU
time of the window, the objects its watches hold and the watch events they received; this process reports
the requests localkube answered the trigger process, by what they asked for.

    .venv/bin/python benchmarks/unrelated_pods.py                      # N = 100, 2,000 unrelated, 2 rounds
    .venv/bin/python benchmarks/unrelated_pods.py --jobs 20 --unrelated 500 --rounds 1 --window 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from baseline import baseline_tree

HERE = Path(__file__).resolve().parent
CONN_ID = "scale_bench"  # the connection scale.child_env defines
NAMESPACE = "default"
SAMPLE = 0.5
LONG_SCRIPT = json.dumps({"default": {"duration": 36000}})


# -- the trigger process -------------------------------------------------------------------------------------


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return 0


_OUT = sys.stdout  # the trigger process's JSON lines; everything else it prints goes to its stderr


def _send(kind: str, **fields: Any) -> None:
    _OUT.write(json.dumps({"type": kind, **fields}) + "\n")
    _OUT.flush()


async def _child(args: argparse.Namespace) -> None:
    import gc

    import airflow_provider_training
    from airflow_provider_training.kinds.registry import get_kind
    from airflow_provider_training.triggers.training import TrainingJobTrigger
    from airflow_provider_training.watch import WatchHub

    kind = get_kind("PyTorchJob")
    triggers = [
        TrainingJobTrigger(
            kind=kind.kind,
            api_version=kind.api_version,
            job_name=f"job-{i:04d}",
            namespace=NAMESPACE,
            kubernetes_conn_id=CONN_ID,
            get_logs=False,
        )
        for i in range(args.jobs)
    ]
    gc.collect()
    before = _status_kb("VmRSS")

    async def first_event(trigger: Any) -> Any:
        events = trigger.run()
        try:
            return (await anext(events)).payload
        finally:
            await events.aclose()

    tasks = [asyncio.create_task(first_event(t)) for t in triggers]
    hub = WatchHub.shared()
    # Synced: the job watch and the pod watch(es) have listed. (The hub's private table: this must read the
    # baseline revision's hub too.)
    while len(hub._watches) < 2 or not all(w.synced for w in hub._watches.values()):
        if all(task.done() for task in tasks):
            raise RuntimeError(f"every trigger ended before the hub listed: {tasks[0].result()}")
        await asyncio.sleep(0.05)
    synced = _status_kb("VmRSS")
    _send("synced")
    cpu = os.times()
    samples = []
    for _ in range(int(args.window / SAMPLE)):
        await asyncio.sleep(SAMPLE)
        samples.append(_status_kb("VmRSS"))
    cpu_s = sum(os.times()[:2]) - sum(cpu[:2])
    stats = hub.stats
    cached = {
        w.resource.key + (f" {w.scope}" if getattr(w, "scope", "") else ""): len(w.objects)
        for w in hub._watches.values()
    }
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    _send(
        "result",
        provider=str(Path(airflow_provider_training.__file__).parent),
        rss_before_kb=before,
        rss_synced_kb=synced,
        rss_kb=samples,
        peak_kb=_status_kb("VmHWM"),
        cpu_s=cpu_s,
        cached=cached,
        events=stats.events,
    )


# -- the cluster ---------------------------------------------------------------------------------------------


def unrelated_pod(index: int) -> dict[str, Any]:
    """A pod of some other workload, as a Deployment creates them (a few KB, as on a real cluster)."""
    from localkube.runtime import ANNOTATION

    app = f"svc-{index % 40:02d}"
    container = {
        "name": "app",
        "image": f"registry.example.com/platform/{app}:1.42.7",
        "args": ["--port=8080", "--metrics-port=9090", "--log-format=json"],
        "env": [{"name": f"SETTING_{k}", "value": f"value-of-setting-{k}-for-{app}"} for k in range(12)],
        "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/app"},
            {"name": "cache", "mountPath": "/cache"},
        ],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-7d9f8c6b5-{index:05d}",
            "labels": {"app": app, "pod-template-hash": "7d9f8c6b5", "tier": "backend"},
            "annotations": {ANNOTATION: LONG_SCRIPT, "prometheus.io/scrape": "true"},
        },
        "spec": {
            "containers": [container],
            "volumes": [{"name": "config", "configMap": {"name": app}}, {"name": "cache", "emptyDir": {}}],
            "serviceAccountName": "default",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
            ],
        },
    }


def wait_running(cluster: Any, count: int) -> None:
    from localkube.resources import PODS

    def running() -> int:
        return sum(
            (p.get("status") or {}).get("phase") == "Running" for p in cluster.store.list(PODS, NAMESPACE)
        )

    while cluster.call(running) < count:
        time.sleep(1)


class Churn:
    """Changes ``rate`` unrelated pods a second (an annotation) on the cluster's loop, from a thread."""

    def __init__(self, cluster: Any, names: list[str], rate: float) -> None:
        self.cluster, self.names, self.rate = cluster, names, rate
        self.changes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from localkube.resources import PODS

        while self.rate and not self.stop.wait(1 / self.rate):
            name = self.names[self.changes % len(self.names)]
            # A new value every time (a value a former run already set would change nothing).
            patch = {"metadata": {"annotations": {"example.com/revision": str(time.monotonic_ns())}}}
            self.cluster.call(
                self.cluster.store.patch, PODS, NAMESPACE, name, patch, "application/merge-patch+json"
            )
            self.changes += 1

    def __enter__(self) -> Churn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def measure(
    cluster: Any, args: argparse.Namespace, hub: str, pythonpath: str, names: list[str], work: Path
) -> dict[str, Any]:
    from scale import Child, child_env

    kubeconfig = cluster.write_kubeconfig(work / f"{hub}.kubeconfig")
    env = child_env(kubeconfig)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env["PYTHONPATH"]) if p)
    since = len(cluster.requests)
    argv = [sys.executable, __file__, "--child", f"--jobs={args.jobs}", f"--window={args.window}"]
    child = Child(argv, env, work / f"{hub}.stderr")
    try:
        child.expect("synced", 600)
        with Churn(cluster, names, args.churn) as churn:
            result = child.expect("result", args.window + 120)
    finally:
        child.close()
    asked: Counter[str] = Counter()
    for record in cluster.requests[since:]:
        resource = record.path.rsplit("/", 1)[-1]
        verb = "WATCH" if record.query.get("watch") in ("true", "1") else record.method
        selector = record.query.get("labelSelector")
        asked[f"{verb} {resource}" + (f" labelSelector={selector}" if selector else "")] += 1
    return {
        **result,
        "hub": hub,
        "requests": sum(asked.values()),
        "asked": dict(asked),
        "changes": churn.changes,
    }


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\nN = {args.jobs} waiting PyTorchJobs ({2 * args.jobs} pods), {args.unrelated} unrelated pods, "
        f"{args.churn:g} unrelated-pod changes/s, window {args.window:g} s\n"
    )
    header = (
        f"{'hub':<10}{'RSS before':>11}{'synced':>9}{'steady':>9}{'peak':>9}{'hub+trig':>10}"
        f"{'per job':>9}{'cached':>8}{'events':>8}{'CPU s':>7}{'req':>5}"
    )
    print(header + "\n" + "-" * len(header))
    for row in rows:
        steady = statistics.median(row["rss_kb"])
        held = steady - row["rss_before_kb"]  # what the hub and the triggers hold
        print(
            f"{row['hub']:<10}{row['rss_before_kb'] / 1024:>9.1f}MB{row['rss_synced_kb'] / 1024:>7.1f}MB"
            f"{steady / 1024:>7.1f}MB{row['peak_kb'] / 1024:>7.1f}MB{held / 1024:>8.1f}MB"
            f"{held / args.jobs:>6.0f} KB{sum(row['cached'].values()):>8}"
            f"{row['events']:>8}{row['cpu_s']:>7.2f}{row['requests']:>5}"
        )
    for row in rows:
        print(f"\n{row['hub']} ({row['provider']}): cached {row['cached']}")
        print(f"  {row['changes']} unrelated-pod changes in the window; the requests it sent:")
        for what, count in sorted(row["asked"].items()):
            print(f"  {count:4d}  {what}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--unrelated", type=int, default=2000)
    parser.add_argument("--churn", type=float, default=10.0, help="unrelated-pod changes a second")
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", default="d00515f", help="git revision of the unscoped hub")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.stdout = sys.stderr
        asyncio.run(_child(args))
        return

    from localkube.resources import PODS
    from scale_cluster import create_jobs, start_cluster

    cluster, _runtime = start_cluster(log_every=3600)  # job pods stay Running, (almost) silent
    try:
        with tempfile.TemporaryDirectory(prefix="unrelated-pods-") as tmp:
            work = Path(tmp)
            pods = [unrelated_pod(i) for i in range(args.unrelated)]
            started = time.monotonic()
            cluster.call(lambda: [cluster.store.create(PODS, NAMESPACE, pod) for pod in pods])
            create_jobs(cluster, [f"job-{i:04d}" for i in range(args.jobs)])
            wait_running(cluster, args.unrelated + 2 * args.jobs)
            size = {
                selector or "(none)": len(
                    json.dumps(cluster.call(cluster.store.list, PODS, NAMESPACE, selector))
                )
                for selector in (None, "training.kubeflow.org/job-name")
            }
            print(
                f"cluster ready in {time.monotonic() - started:.0f} s; a pod LIST's JSON by labelSelector: "
                + ", ".join(f"{k}: {v / 1e6:.2f} MB" for k, v in size.items())
            )
            baseline = str(baseline_tree(args.baseline))
            names = [pod["metadata"]["name"] for pod in pods]
            rows = []
            for _ in range(args.rounds):
                rows.append(measure(cluster, args, "scoped", "", names, work))
                rows.append(measure(cluster, args, "unscoped", baseline, names, work))
            report(sorted(rows, key=lambda row: row["hub"] == "unscoped"), args)
    finally:
        cluster.stop_thread()


if __name__ == "__main__":
    main()
