"""The provider's budget in a triggerer, on the real kube-apiserver over TLS, side by side with a baseline.

    python benchmarks/budget.py                      # N = 1,000; baseline 53df9b2 (main before issue 28)
    python benchmarks/budget.py --jobs 300 --baseline ''   # the current tree only

Each code tree (the baseline, checked out once into ~/.cache/airflow-provider-training/baseline-<ref> by
``git archive``, then this tree) runs the same trigger process (``scale_child.py``: N ``TrainingJobTrigger``
on one loop, as a triggerer runs them), the tree first on its ``PYTHONPATH``. The control plane is the real
tier's (``scale_real.RealServer``: etcd, kube-apiserver with TLS, kube-controller-manager, localkube's agent
as the Kubeflow controller and the kubelet); its PyTorchJobs (a Master and a Worker) stay Running.

Per tree, on a fresh control plane with N jobs:

1. with logs: the triggers with ``get_logs=True, log_replicas="all"`` (two followed pods per job), armed
   (every follow open at kube-apiserver) and settled (loop lag < 100 ms for 1 s), then ``--window`` s:
   KB per job = (median RSS in the window - RSS before the triggers started) / N, and the requests
   kube-apiserver answered on what the triggers read (jobs, pods, logs, events) per second, less what it
   answered on those before the triggers started (the control plane's own);
2. without logs, on the same control plane after the first process ended: the same two figures; then the
   jobs' status is written Succeeded, 100 jobs a second (``RealServer.flip``), and a plain watch of the
   benchmark stamps each terminal event: observed -> trigger event, p99, is the provider's share.

Then one control plane with ``--stall-jobs`` (200) jobs: per tree, that many triggers with logs start at
once; the longest event-loop stall from their start until the loop settled (a 50 ms probe's lateness).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale_real
from baseline import baseline_tree
from scale import STREAMS_PER_JOB, Child, child_env, pct, quiet_since, trigger_argv, wait_until
from trigger_load import KIND

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "benchmarks"
BASELINE = "53df9b2"  # main before issue 28
CACHE = Path.home() / ".cache/airflow-provider-training"
# What the triggers read; the control plane's own requests on them are subtracted (measured before).
READ_BY_TRIGGERS = ("pytorchjobs", "pods", "pods/log", "events")
BUDGET = {"kb": 40.0, "kb_logs": 60.0, "rps": 0.0, "p99_ms": 250.0, "stall_ms": 100.0}


@dataclass
class Row:
    tree: str
    kb: float = float("nan")
    kb_logs: float = float("nan")
    rps: float = float("nan")
    rps_logs: float = float("nan")
    latencies: list[float] = field(default_factory=list)  # observed -> event, s
    events: int = 0
    stall_s: float = float("nan")
    flip_lag_s: float = float("nan")  # the longest loop lag while the events came
    flip_gc_s: float = float("nan")  # the longest garbage collection meanwhile
    notes: list[str] = field(default_factory=list)


def read_requests(server: scale_real.RealServer) -> int:
    counts: Counter[str] = server.requests()
    return sum(n for key, n in counts.items() if key.split(" ", 1)[-1] in READ_BY_TRIGGERS)


def background_rate(server: scale_real.RealServer, window: float) -> float:
    before = read_requests(server)
    time.sleep(window)
    return (read_requests(server) - before) / window


def session(
    server: scale_real.RealServer,
    observer: scale_real.Observer,
    tree: Path,
    mode: str,
    jobs: int,
    args: argparse.Namespace,
    row: Row,
    *,
    flip: bool = False,
) -> tuple[float, float, float]:
    """One trigger process of ``tree`` on the running control plane: (KB per job, requests/s beyond the
    background, the longest loop stall until settled, s); with ``flip``, the jobs are then ended and
    ``row.latencies`` filled."""
    background = background_rate(server, args.window)
    env = child_env(server.kubeconfig)
    env["PYTHONPATH"] = os.pathsep.join((str(tree), str(HERE)))
    argv = trigger_argv(mode, jobs, args.prefix, server.kubeconfig, args)
    stderr = Path(args.workdir) / f"{tree.name}-{mode}-{jobs}.stderr"
    child = Child(argv, env, stderr)
    try:
        ready = child.expect("ready", 300)
        rss_before = ready["rss_kb"]
        if not str(ready.get("provider", "")).startswith(str(tree)):
            raise RuntimeError(f"the trigger process imported the provider from {ready.get('provider')}")
        child.send("go")
        started = child.expect("started", 60)["t"]
        streams = STREAMS_PER_JOB[mode] * jobs

        def armed() -> bool:
            return (
                server.longrunning("pods") >= 1
                and server.longrunning(KIND.resource.plural) >= 2
                and server.longrunning("pods", "log") >= streams
            )

        wait_until(armed, args.startup_timeout, f"{tree.name}: the triggers' watches and log streams")
        armed_at = time.monotonic()
        deadline = armed_at + args.settle_max
        while (settled := quiet_since(child.samples, armed_at)) is None:
            if time.monotonic() > deadline:
                row.notes.append(f"{mode} N={jobs}: loop not quiet within {args.settle_max:g} s of arming")
                settled = time.monotonic()
                break
            time.sleep(0.25)
        during = [s["lag"] for s in child.samples if started <= s["t"] <= settled + 1.0]
        stall = max(during, default=float("nan"))
        time.sleep(args.settle)
        window_start, before = time.monotonic(), read_requests(server)
        time.sleep(args.window)
        rps = (read_requests(server) - before) / args.window - background
        rss = [s["rss_kb"] for s in child.samples if s["t"] >= window_start]
        kb = (sorted(rss)[len(rss) // 2] - rss_before) / jobs if rss else float("nan")
        if flip:
            names = [f"{args.prefix}-{i:04d}" for i in range(jobs)]
            flipped = time.monotonic()
            done = server.flip(observer, names, args.flip_rate)
            try:
                child.expect("done", jobs / args.flip_rate + args.event_timeout)
            except TimeoutError:
                row.notes.append(f"{jobs - len(child.events)} events missing after the flips")
            after = [s for s in child.samples if s["t"] >= flipped]
            row.flip_lag_s = max((s["lag"] for s in after), default=float("nan"))
            row.flip_gc_s = max((s.get("gc", float("nan")) for s in after), default=float("nan"))
            for event in list(child.events):
                row.events += 1
                if event["name"] in done.written and (seen := observer.observed.get(event["name"])):
                    row.latencies.append(event["t"] - seen)
        return kb, rps, stall
    finally:
        child.close()
        wait_until(lambda: server.longrunning("pods", "log") == 0, 120, "the log streams to close")


def control_plane(
    jobs: int, args: argparse.Namespace, name: str
) -> tuple[scale_real.RealServer, scale_real.Observer]:
    server = scale_real.RealServer(Path(args.workdir) / name)
    names = [f"{args.prefix}-{i:04d}" for i in range(jobs)]
    server.create_jobs(names)
    observer = scale_real.Observer(server.cluster)
    wait_until(lambda: observer.running() >= jobs, args.setup_timeout, f"{jobs} Running jobs")
    if server.wait_quiet(args.quiet_timeout) is None:
        print(f"kube-apiserver not quiet within {args.quiet_timeout:g} s", file=sys.stderr)
    return server, observer


def measure(trees: dict[str, Path], args: argparse.Namespace) -> list[Row]:
    rows = {label: Row(label) for label in trees}
    for label, tree in trees.items():
        print(f"... {label}: N={args.jobs}, with logs then without", file=sys.stderr, flush=True)
        server, observer = control_plane(args.jobs, args, f"{tree.name}-{args.jobs}")
        try:
            row = rows[label]
            row.kb_logs, row.rps_logs, _ = session(server, observer, tree, "hub-logs", args.jobs, args, row)
            row.kb, row.rps, _ = session(server, observer, tree, "hub", args.jobs, args, row, flip=True)
        finally:
            observer.stop()
            server.stop()
    print(f"... {args.stall_jobs} triggers starting at once", file=sys.stderr, flush=True)
    server, observer = control_plane(args.stall_jobs, args, f"stall-{args.stall_jobs}")
    try:
        for label, tree in trees.items():
            _, _, rows[label].stall_s = session(
                server, observer, tree, "hub-logs", args.stall_jobs, args, rows[label]
            )
    finally:
        observer.stop()
        server.stop()
    return list(rows.values())


def report(rows: list[Row], args: argparse.Namespace) -> None:
    load = os.getloadavg()
    print(
        f"\nbudget.py: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, N = {args.jobs:,}, "
        f"{args.stall_jobs} for the stall; kube-apiserver over TLS; load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f}, {os.cpu_count()} CPUs"
    )
    head = (
        f"{'tree':<28} {'KB/job':>7} {'KB/job logs':>11} {'req/s':>6} {'req/s logs':>10} "
        f"{'status->event p99 ms':>20} {'n':>5} {'stall ms':>8}"
    )
    print(head)
    budget = (
        f"{'budget':<28} {'<= 40':>7} {'<= 60':>11} {'0':>6} {'0':>10} {'< 250':>20} {'':>5} {'< 100':>8}"
    )
    print(budget)
    for row in rows:
        p99 = pct([v * 1000 for v in row.latencies], 0.99)
        print(
            f"{row.tree:<28} {row.kb:>7.1f} {row.kb_logs:>11.1f} {row.rps:>6.1f} {row.rps_logs:>10.1f} "
            f"{p99:>20.0f} {len(row.latencies):>5} {row.stall_s * 1000:>8.0f}"
        )
        print(
            f"    {row.tree}: while the events came, the longest loop lag {row.flip_lag_s * 1000:.0f} ms, "
            f"the longest garbage collection {row.flip_gc_s * 1000:.0f} ms"
        )
        for note in row.notes:
            print(f"    {row.tree}: {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs waited for (default 1000)")
    parser.add_argument("--stall-jobs", type=int, default=200, help="triggers starting at once (200)")
    parser.add_argument(
        "--baseline", default=BASELINE, help=f"git ref to compare with ({BASELINE}; '': none)"
    )
    parser.add_argument("--window", type=float, default=10.0, help="memory and request window, s (10)")
    parser.add_argument("--settle", type=float, default=3.0, help="wait after the loop settled, s (3)")
    parser.add_argument("--settle-max", type=float, default=60.0, help="longest wait for a quiet loop, s")
    parser.add_argument("--startup-timeout", type=float, default=300.0)
    parser.add_argument("--setup-timeout", type=float, default=900.0)
    parser.add_argument("--quiet-timeout", type=float, default=180.0)
    parser.add_argument("--event-timeout", type=float, default=60.0, help="after the last flip, s")
    parser.add_argument("--flip-rate", type=float, default=100.0, help="jobs ended per second (100)")
    parser.add_argument("--sample", type=float, default=0.5, help="trigger process sample interval, s")
    args = parser.parse_args()
    args.prefix, args.poll_interval = "b", 10.0
    trees = {}
    if args.baseline:
        trees[f"baseline {args.baseline}"] = baseline_tree(args.baseline)
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    trees[f"this tree ({head.stdout.strip() or '?'})"] = REPO
    with tempfile.TemporaryDirectory(prefix="budget-") as workdir:
        args.workdir = workdir
        report(measure(trees, args), args)


if __name__ == "__main__":
    main()
