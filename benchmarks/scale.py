"""Scale: N training jobs waited for by one trigger process, with and without live logs, against two
polling baselines; and how long a worker takes to submit. Prints every figure side by side, with n and spread.

    python benchmarks/scale.py                       # N = 100, 500, 1000; every mode; submit latency
    python benchmarks/scale.py --jobs 100 --modes hub,hub-logs --no-submit
    python benchmarks/scale.py --jobs 5000           # opt-in size
    python benchmarks/scale.py --profile             # where memory and CPU go: logs mode at N = 300
    python benchmarks/scale.py --profile --profile-mode hub   # ... or another mode
    python benchmarks/scale.py --server real --jobs 1000   # status change to event on kube-apiserver + etcd

Modes (one fresh trigger process per mode and N; see benchmarks/README.md for what each measures):

- ``hub``: N ``TrainingJobTrigger`` (get_logs=False), sharing the process's watch hub;
- ``hub-logs``: the same with get_logs=True, log_replicas="all" (two pods per job);
- ``hub-deciding``: get_logs=True with the default log_replicas="deciding" (the Master's pod per job);
- ``sdk-poll``: GET the job every --poll-interval s through one shared client (Kubeflow SDK style);
- ``cncf-poll``: the cncf provider's way: a real AsyncKubernetesHook per trigger, a new ApiClient per GET.
- ``floor``: a trigger that sends no request and waits until cancelled: what the triggerer itself spends per
  trigger, below which no trigger can go (no start-up or status-change figures: it never hears of the jobs).

localkube (default controllers; a scripted runtime whose containers stay Running and log a line every
--log-every s) runs in a thread of this process, on its own loop. Every request it answers is stamped on
arrival; each job's terminal status write is stamped by a store subscription. Both use time.monotonic(),
which is one clock for every process of the machine, so the trigger process's event times compare directly.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale_real
from localkube.cluster import LocalKube
from localkube.pytest_plugin import connection_json
from scale_cluster import (
    NAMESPACE,
    create_jobs,
    start_cluster,
)
from scale_manifest import MARK
from trigger_load import KIND, StatusClock, terminal

HERE = Path(__file__).resolve().parent
CHILD = HERE / "scale_child.py"
CONN_ID = "scale_bench"
MODES = {
    "hub": "watch hub, no logs",
    "hub-logs": "watch hub, logs (all)",
    "hub-deciding": "watch hub, logs (deciding)",
    "sdk-poll": "SDK-style poll, shared client",
    "cncf-poll": "cncf-style poll, client per GET",
    "floor": "idle trigger, no request (floor)",
}
# The hub modes, and the log streams each job's trigger opens in them.
STREAMS_PER_JOB = {"hub": 0, "hub-logs": 2, "hub-deciding": 1}
QUIET_LAG = 0.1  # the loop counts as settled once its lag stays below this for QUIET_FOR seconds
QUIET_FOR = 1.0


# -- figures -------------------------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def spread(values: Sequence[float], fmt: str = "{:.1f}", centre: float | None = None) -> str:
    """``centre (min-max, n=k)``; the centre is the median unless given (a mean over the whole window)."""
    if not values:
        return "-"
    middle = median(values) if centre is None else centre
    return f"{fmt.format(middle)} ({fmt.format(min(values))}-{fmt.format(max(values))}, n={len(values)})"


@dataclass
class Measurement:
    mode: str
    jobs: int
    setup_s: float = 0.0  # creating the jobs until all their pods ran
    rss_before_kb: int = 0
    import_s: float = 0.0
    subscribed_s: float | None = None  # from the triggers' start to the last request that armed them all
    settled_s: float | None = None  # ... to the loop being quiet as well
    startup_requests: int = 0
    startup_kinds: dict[str, int] = field(default_factory=dict)
    startup_lag_max: float = 0.0
    peak_rss_kb: int = 0
    steady_window: float = 0.0
    steady_bins: list[float] = field(default_factory=list)  # requests per 1-s bin
    steady_kinds: dict[str, int] = field(default_factory=dict)
    steady_rss_kb: list[int] = field(default_factory=list)
    steady_cpu: list[float] = field(default_factory=list)  # CPU % per sample interval
    steady_cpu_mean: float = 0.0
    steady_lines: float = 0.0  # replica log lines per second the triggers' logs received
    steady_lag_max: float = 0.0
    latencies: list[float] = field(default_factory=list)
    server_latencies: list[float] = field(
        default_factory=list
    )  # status write -> watch event sent (localkube)
    client_latencies: list[float] = field(default_factory=list)  # watch event sent -> trigger event
    missing_write: int = 0
    server: str = "localkube"
    write_answered: list[float] = field(default_factory=list)  # real server: the status PATCH's round trip
    flip_lag_max: float = 0.0  # the trigger process's longest loop lag while the events came
    flip_behind_s: float = 0.0  # how far the real server's status writes fell behind the flip rate
    # Real server, with logs: observed -> event split at the log streamer's stop() (the final reads).
    until_stop: list[float] = field(default_factory=list)  # observed -> stop() began
    stop_s: list[float] = field(default_factory=list)  # stop() itself: follows cancelled, final reads
    after_stop: list[float] = field(default_factory=list)  # stop() ended -> event
    final_reads: list[float] = field(default_factory=list)  # each final read, sent -> body read
    flip_cpu: dict[str, float] = field(default_factory=dict)  # % of one core over the flips, by process
    events: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def steady_rps(self) -> float:
        return sum(self.steady_bins) / self.steady_window if self.steady_window else float("nan")

    @property
    def per_job_kb(self) -> float:
        if not self.steady_rss_kb:
            return float("nan")
        return (statistics.median(self.steady_rss_kb) - self.rss_before_kb) / self.jobs


# -- the trigger process -------------------------------------------------------------------------------------


class Child:
    """A trigger process: its JSON lines collected by a reader thread."""

    def __init__(self, argv: list[str], env: dict[str, str], stderr: Path) -> None:
        self.spawned = time.monotonic()
        self._stderr = stderr.open("w")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            text=True,
            bufsize=1,
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.samples: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.stops: list[dict[str, Any]] = []  # each job's ReplicaLogStreamer.stop(), with logs
        self.stderr_path = stderr
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if message["type"] == "sample":
                self.samples.append(message)
            elif message["type"] == "event":
                self.events.append(message)
            elif message["type"] == "stop":
                self.stops.append(message)
            else:
                self.messages.put(message)
        self.messages.put({"type": "eof"})

    def expect(self, kind: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"the trigger process sent no {kind!r} within {timeout:g} s") from None
            if message["type"] == kind:
                return message
            if message["type"] == "eof":
                tail = self.stderr_path.read_text()[-3000:]
                raise RuntimeError(f"the trigger process ended before {kind!r}:\n{tail}")

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def close(self, grace: float = 30.0) -> None:
        self.send("stop")
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._stderr.close()


def trigger_argv(mode: str, jobs: int, prefix: str, kubeconfig: Path, args: argparse.Namespace) -> list[str]:
    """The trigger process's command line: ``jobs`` triggers of ``mode`` for the jobs ``<prefix>-NNNN``."""
    return [
        sys.executable,
        str(CHILD),
        "triggers",
        f"--mode={mode}",
        f"--jobs={jobs}",
        f"--prefix={prefix}",
        f"--conn-id={CONN_ID}",
        f"--kubeconfig={kubeconfig}",
        f"--poll-interval={args.poll_interval}",
        f"--sample={args.sample}",
    ]


def child_env(kubeconfig: Path) -> dict[str, str]:
    env = {**os.environ, f"AIRFLOW_CONN_{CONN_ID.upper()}": connection_json(kubeconfig, NAMESPACE)}
    env.pop("KUBECONFIG", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    return env


# -- what the server saw -------------------------------------------------------------------------------------


def request_kind(record: Any) -> str:
    path, query = record.path, record.query
    if str(query.get("watch", "")).lower() in ("true", "1"):
        return "watch"
    if path.endswith("/log"):
        return "log follow" if str(query.get("follow", "")).lower() in ("true", "1") else "log read"
    tail = path.rsplit("/", 2)
    if record.method != "GET":
        return record.method
    if tail[-1] in ("pods", "pytorchjobs", "events"):
        return f"list {tail[-1]}"
    return f"get {tail[-2]}"


def armed_at(mode: str, jobs: int, timed: list[tuple[float, Any]]) -> float | None:
    """When the server had seen what every trigger needs to be waiting (the request that completed it)."""
    if mode in STREAMS_PER_JOB:
        watches = {
            r.path.rsplit("/", 1)[-1]: t for t, r in timed if request_kind(r) == "watch" and r.status == 200
        }
        if "pods" not in watches or "pytorchjobs" not in watches:
            return None
        armed = max(watches["pods"], watches["pytorchjobs"])
        if mode == "hub":
            return armed
        streams: dict[str, float] = {}
        for t, r in timed:
            if request_kind(r) == "log follow" and r.status == 200:
                streams.setdefault(r.path, t)
        return max(armed, *streams.values()) if len(streams) >= STREAMS_PER_JOB[mode] * jobs else None
    gets: dict[str, float] = {}
    for t, r in timed:
        if request_kind(r) == "get pytorchjobs":
            gets.setdefault(r.path, t)
    return max(gets.values()) if len(gets) >= jobs else None


def quiet_since(samples: list[dict[str, Any]], after: float) -> float | None:
    """The first time after ``after`` from which the loop lag stayed below QUIET_LAG for QUIET_FOR s."""
    start = None
    for s in samples:
        if s["t"] < after:
            continue
        if s["lag"] >= QUIET_LAG:
            start = None
        elif start is None:
            start = s["t"]
        if start is not None and s["t"] - start >= QUIET_FOR:
            return start
    return None


# -- one (mode, N) -------------------------------------------------------------------------------------------


def measure(
    mode: str, jobs: int, args: argparse.Namespace, workdir: Path, profile: Path | None = None
) -> Measurement:
    m = Measurement(mode, jobs)
    cluster, runtime = start_cluster(args.log_every)
    clock = StatusClock(cluster)
    sent = SentClock(cluster)
    kubeconfig = cluster.write_kubeconfig(workdir / f"{mode}-{jobs}.kubeconfig")
    prefix = f"j{jobs}"
    argv = trigger_argv(mode, jobs, prefix, kubeconfig, args)
    if profile is not None:
        argv.append(f"--profile={profile}")
    child = Child(argv, child_env(kubeconfig), workdir / f"{mode}-{jobs}.stderr")
    try:
        names = [f"{prefix}-{i:04d}" for i in range(jobs)]
        began = time.monotonic()
        create_jobs(cluster, names)
        wait_until(lambda: runtime.running >= 2 * jobs, args.setup_timeout, f"{2 * jobs} running pods")
        m.setup_s = time.monotonic() - began
        ready = child.expect("ready", 300)
        m.rss_before_kb, m.import_s = ready["rss_kb"], ready["import_s"]
        go = time.monotonic()
        child.send("go")
        started = child.expect("started", 60)["t"]
        requests = cluster.requests
        assert hasattr(requests, "between")

        # -- start-up: until every trigger is armed (server side) and the loop is quiet
        deadline = started + args.startup_timeout
        subscribed = settled = None
        if mode == "floor":  # armed once started: it waits on nothing the server says
            subscribed = started
        while time.monotonic() < deadline:
            time.sleep(0.25)
            now = time.monotonic()
            if subscribed is None:
                subscribed = armed_at(mode, jobs, requests.between(go, now))
            if subscribed is not None:
                settled = quiet_since(child.samples, subscribed)
                if settled is not None or now - subscribed > args.settle_max:
                    break
        if subscribed is None:
            m.notes.append(f"not all armed within {args.startup_timeout:g} s")
        elif settled is None:
            m.notes.append(f"loop not quiet within {args.settle_max:g} s of arming")
        m.subscribed_s = None if subscribed is None else subscribed - started
        end_of_startup = settled or time.monotonic()
        m.settled_s = None if settled is None else settled - started
        startup = requests.between(go, end_of_startup)
        m.startup_requests = len(startup)
        m.startup_kinds = dict(Counter(request_kind(record) for _, record in startup))
        lags = [s["lag"] for s in child.samples if s["t"] <= end_of_startup]
        m.startup_lag_max = max(lags, default=0.0)

        # -- steady window
        time.sleep(args.settle)
        if profile is not None:  # the snapshot stops the loop for a while: the window starts after it
            child.send("snapshot")
            child.expect("snapshotted", 900)
        window_start = time.monotonic()
        time.sleep(args.window)
        window_end = time.monotonic()
        timed = requests.between(window_start, window_end)
        steady(m, timed, child.samples, window_start, window_end)

        if mode == "floor":  # it would never hear of the flips
            m.peak_rss_kb = max((s["rss_kb"] for s in child.samples), default=0)
            return m
        # -- flip every job to Succeeded, --flip-rate jobs a second
        flip(cluster, runtime, names, len(names) / args.flip_rate)
        await_events(m, child, args)
        for event in list(child.events):
            m.events[event["status"]] = m.events.get(event["status"], 0) + 1
            written = clock.written.get(event["name"])
            if written is None:
                m.missing_write += 1
            else:
                m.latencies.append(event["t"] - written)
                if (out := sent.sent.get(event["name"])) is not None:
                    m.server_latencies.append(out - written)
                    m.client_latencies.append(event["t"] - out)
        m.peak_rss_kb = max((s["rss_kb"] for s in child.samples), default=0)
    finally:
        child.close(300.0 if profile is not None else 30.0)  # a profiled child writes its report at exit
        clock.stop()
        cluster.stop_thread()
    return m


class SentClock:
    """When localkube's server first wrote each job's terminal status to a watch client (its observer runs
    on the cluster's loop, right after the write), the clock :class:`StatusClock` and the child use."""

    def __init__(self, cluster: Any) -> None:
        self.sent: dict[str, float] = {}
        cluster.watch_observer = self._observe

    def _observe(self, plural: str, type_: str, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name", "")
        if plural == KIND.resource.plural and name not in self.sent and terminal(obj):
            self.sent[name] = time.perf_counter()


def steady(
    m: Measurement, timed: list[tuple[float, Any]], samples: list[dict[str, Any]], start: float, end: float
) -> None:
    m.steady_window = end - start
    bins = [0.0] * max(1, round(m.steady_window))
    for t, record in timed:
        bins[min(len(bins) - 1, int(t - start))] += 1
        kind = request_kind(record)
        m.steady_kinds[kind] = m.steady_kinds.get(kind, 0) + 1
    m.steady_bins = bins
    inside = [s for s in samples if start <= s["t"] <= end]
    m.steady_rss_kb = [s["rss_kb"] for s in inside]
    m.steady_cpu = [
        100 * (b["cpu_s"] - a["cpu_s"]) / (b["t"] - a["t"]) for a, b in itertools.pairwise(inside)
    ]
    if len(inside) >= 2:
        span = inside[-1]["t"] - inside[0]["t"]
        m.steady_cpu_mean = 100 * (inside[-1]["cpu_s"] - inside[0]["cpu_s"]) / span
        m.steady_lines = (inside[-1]["lines"] - inside[0]["lines"]) / span
    m.steady_lag_max = max((s["lag"] for s in inside), default=0.0)


def measure_real(mode: str, jobs: int, args: argparse.Namespace, workdir: Path) -> Measurement:
    """Status change to event on a real kube-apiserver (``scale_real``): a fresh control plane, N jobs
    Running, a fresh trigger process armed and quiet, then every job's status written Succeeded."""
    import scale_real

    m = Measurement(mode, jobs, server="real")
    directory = workdir / f"real-{mode}-{jobs}"
    server = scale_real.RealServer(directory)
    prefix = f"r{jobs}"
    names = [f"{prefix}-{i:04d}" for i in range(jobs)]
    observer = scale_real.Observer(server.cluster)
    child = None
    try:
        began = time.monotonic()
        server.create_jobs(names)
        wait_until(lambda: observer.running() >= jobs, args.setup_timeout, f"{jobs} Running jobs")
        if server.wait_quiet(args.quiet_timeout) is None:
            m.notes.append(f"kube-apiserver not quiet within {args.quiet_timeout:g} s")
        m.setup_s = time.monotonic() - began
        argv = trigger_argv(mode, jobs, prefix, server.kubeconfig, args)
        child = Child(argv, child_env(server.kubeconfig), directory / "child.stderr")
        ready = child.expect("ready", 300)
        m.rss_before_kb, m.import_s = ready["rss_kb"], ready["import_s"]
        child.send("go")
        started = child.expect("started", 60)["t"]
        # Armed: the hub's two watches (the observer holds one more on the jobs) and, with logs, every
        # followed pod's stream open at kube-apiserver; settled: the trigger process's loop quiet.
        streams = STREAMS_PER_JOB[mode] * jobs

        def armed() -> bool:
            return (
                server.longrunning("pods") >= 1
                and server.longrunning(KIND.resource.plural) >= 2
                and server.longrunning("pods", "log") >= streams
            )

        wait_until(armed, args.startup_timeout, "the triggers' watches and log streams")
        m.subscribed_s = time.monotonic() - started
        deadline = time.monotonic() + args.settle_max
        while (settled := quiet_since(child.samples, started + m.subscribed_s)) is None:
            if time.monotonic() > deadline:
                m.notes.append(f"loop not quiet within {args.settle_max:g} s of arming")
                break
            time.sleep(0.25)
        m.settled_s = None if settled is None else settled - started
        m.startup_lag_max = max((s["lag"] for s in child.samples), default=0.0)
        quiet_from = time.monotonic()
        time.sleep(args.settle)
        # What the armed, quiet process holds before the flips (the samples' clock is CLOCK_MONOTONIC too).
        m.steady_rss_kb = [s["rss_kb"] for s in child.samples if s["t"] >= quiet_from]
        before = server.requests()
        flipped = time.monotonic()
        trigger_pid = child.proc.pid

        def cpu_now() -> dict[str, float]:
            return {
                **server.cpu_seconds(),
                "trigger process": scale_real.process_cpu_seconds(trigger_pid),
                "benchmark (writes, watch)": scale_real.process_cpu_seconds(os.getpid()),
            }

        cpu_before = cpu_now()
        flip = server.flip(observer, names, args.flip_rate, end=args.end)
        m.flip_behind_s = flip.behind_s
        await_events(m, child, args)
        cpu_after = cpu_now()
        span = time.monotonic() - flipped - 0.2  # await_events sleeps 0.2 s after the last event
        m.flip_cpu = {name: 100 * (cpu_after[name] - used) / span for name, used in cpu_before.items()}
        m.steady_kinds = dict(server.requests() - before)  # here: what the server answered over the flips
        m.flip_lag_max = max((s["lag"] for s in child.samples if s["t"] >= flipped), default=0.0)
        for event in list(child.events):
            m.events[event["status"]] = m.events.get(event["status"], 0) + 1
            written = flip.written.get(event["name"])
            if written is None:
                m.missing_write += 1
                continue
            m.latencies.append(event["t"] - written)
            m.write_answered.append(flip.answered[event["name"]] - written)
            if (seen := observer.observed.get(event["name"])) is not None:
                m.server_latencies.append(seen - written)
                m.client_latencies.append(event["t"] - seen)
        events_at = {event["name"]: event["t"] for event in child.events}
        for stop in list(child.stops):
            seen, at = observer.observed.get(stop["name"]), events_at.get(stop["name"])
            if seen is None or at is None:
                continue
            m.until_stop.append(stop["began"] - seen)
            m.stop_s.append(stop["ended"] - stop["began"])
            m.after_stop.append(at - stop["ended"])
            m.final_reads.extend(stop["reads"])
        m.peak_rss_kb = max((s["rss_kb"] for s in child.samples), default=0)
    finally:
        if child is not None:
            child.close()
        observer.stop()
        server.stop()
    return m


def report_real(runs: list[Measurement], args: argparse.Namespace) -> None:
    load = os.getloadavg()
    print(
        f"\nscale.py --server real: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs; kube-apiserver and etcd "
        f"(scripts/realkube/build.sh), localkube agent as the controller and kubelet; {args.flip_rate:g} "
        + (
            "status writes/s"
            if args.end == "status"
            else "jobs ended/s by their replicas (--end replicas: the gates opened, the agent's controller "
            "writes Succeeded; 'write' below is the gate's write)"
        )
    )
    table(
        "status change (the status PATCH sent) to trigger event, ms",
        f"{'N':>5} {'mode':<32} {'p50':>6} {'p99':>6} {'max':>6} {'n':>5}  {'write->observed p50':>19} "
        f"{'p99':>5}  {'observed->event p50':>19} {'p99':>5}  {'PATCH p50':>9} {'p99':>5}  "
        f"{'lag max s':>9}  events",
    )
    for m in runs:
        lat, seen, rest, patch = (
            [v * 1000 for v in values]
            for values in (m.latencies, m.server_latencies, m.client_latencies, m.write_answered)
        )
        events = ", ".join(f"{k} {v}" for k, v in sorted(m.events.items()))
        notes = m.notes + ([f"writes up to {m.flip_behind_s:.1f} s behind"] if m.flip_behind_s > 0.5 else [])
        print(
            f"{m.jobs:>5} {MODES[m.mode]:<32} {pct(lat, 0.5):>6.0f} {pct(lat, 0.99):>6.0f} "
            f"{max(lat, default=float('nan')):>6.0f} {len(lat):>5}  {pct(seen, 0.5):>19.0f} "
            f"{pct(seen, 0.99):>5.0f}  {pct(rest, 0.5):>19.0f} {pct(rest, 0.99):>5.0f}  "
            f"{pct(patch, 0.5):>9.0f} {pct(patch, 0.99):>5.0f}  {m.flip_lag_max:>9.2f}  {events}"
            f"{' (' + '; '.join(notes) + ')' if notes else ''}"
        )
    split = [m for m in runs if m.stop_s]
    if split:
        table(
            "observed->event split at the log streamer's stop(), which the waiter awaits before the event "
            "(ms):\nobserved->stop() began, stop() (the follows cancelled, then the final reads), stop() "
            "ended->event; the two outside stop() together (the provider's share besides the reads), per "
            "job; each final read (sent -> body read)",
            f"{'N':>5} {'mode':<32} {'->stop p50':>10} {'p99':>6}  {'stop p50':>8} {'p99':>6}  "
            f"{'stop->event p50':>15} {'p99':>5}  {'outside stop() p50':>18} {'p99':>5}  "
            f"{'reads':>6} {'read p50':>8} {'p99':>6} {'max':>6}",
        )
        for m in split:
            until, stop, after, reads = (
                [v * 1000 for v in values] for values in (m.until_stop, m.stop_s, m.after_stop, m.final_reads)
            )
            outside = [a + b for a, b in zip(until, after, strict=True)]  # observed->event less stop()
            print(
                f"{m.jobs:>5} {MODES[m.mode]:<32} {pct(until, 0.5):>10.0f} {pct(until, 0.99):>6.0f}  "
                f"{pct(stop, 0.5):>8.0f} {pct(stop, 0.99):>6.0f}  {pct(after, 0.5):>15.0f} "
                f"{pct(after, 0.99):>5.0f}  {pct(outside, 0.5):>18.0f} {pct(outside, 0.99):>5.0f}  "
                f"{len(reads):>6} {pct(reads, 0.5):>8.0f} {pct(reads, 0.99):>6.0f} "
                f"{max(reads, default=float('nan')):>6.0f}"
            )
    print("\nCPU over the flips (first write to last event), % of one core, by process")
    for m in runs:
        used = "   ".join(f"{name} {share:.0f}" for name, share in m.flip_cpu.items())
        print(f"{m.jobs:>5} {MODES[m.mode]:<32} {used}")
    print(
        "\nrequests kube-apiserver answered from the first status write to the last event"
        "\n(apiserver_request_total; the benchmark's status PATCHes and gate ConfigMaps,"
        "\nthe agent's pod status and event writes included)"
    )
    for m in runs:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(m.steady_kinds.items(), key=lambda kv: -kv[1]))
        print(f"{m.jobs:>5} {MODES[m.mode]:<32} {kinds or 'none'}")
    print("\nset-up (not part of the figures): creating the jobs until all ran; armed, settled after start")
    for m in runs:
        settled = "-" if m.settled_s is None else f"{m.settled_s:.1f}"
        print(
            f"{m.jobs:>5} {MODES[m.mode]:<32} jobs {m.setup_s:6.1f} s   armed {m.subscribed_s or 0:5.1f} s   "
            f"settled {settled} s   start-up lag max {m.startup_lag_max:.2f} s   "
            f"peak RSS {mb(m.peak_rss_kb)} MB"
        )
    print(
        "\nmemory over TLS before the flips: RSS median of the samples in the --settle window after arming"
        "\n(n samples, min-max), and per job = (that - RSS before the triggers started) / N"
    )
    for m in runs:
        rss = spread([v / 1024 for v in m.steady_rss_kb], "{:.0f}")
        print(
            f"{m.jobs:>5} {MODES[m.mode]:<32} before {mb(m.rss_before_kb)} MB   armed {rss} MB   "
            f"per job {m.per_job_kb:.1f} KB"
        )


def flip(cluster: LocalKube, runtime: Any, names: list[str], over: float) -> None:
    ticks = max(1, round(over / 0.1))
    per_tick = -(-len(names) // ticks)
    for i in range(0, len(names), per_tick):
        cluster.call(runtime.finish, names[i : i + per_tick])
        time.sleep(0.1)


def await_events(m: Measurement, child: Child, args: argparse.Namespace) -> None:
    """Until the trigger process reported every trigger's event (``done``), or ``--event-timeout`` s after
    the flips' end (noted)."""
    try:
        done = child.expect("done", m.jobs / args.flip_rate + args.event_timeout)
        m.failures = done["failures"]
    except TimeoutError:
        missing = m.jobs - len(child.events)
        m.notes.append(f"{missing} events missing {args.event_timeout:g} s after the flips")
    time.sleep(0.2)


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:g} s")
        time.sleep(0.2)


# -- submit latency ------------------------------------------------------------------------------------------


@dataclass
class Submit:
    interpreter_s: list[float] = field(default_factory=list)  # spawn to the script's first line
    sdk_import_s: list[float] = field(default_factory=list)
    operator_import_s: list[float] = field(default_factory=list)
    first_create_s: list[float] = field(default_factory=list)  # execute() entry -> create request, 1st call
    first_request_s: list[float] = field(default_factory=list)  # execute() entry -> its first request
    first_return_s: list[float] = field(default_factory=list)  # execute() entry -> TaskDeferred
    warm_create_s: list[float] = field(default_factory=list)
    warm_return_s: list[float] = field(default_factory=list)
    requests_per_call: list[int] = field(default_factory=list)
    first_call_imports_s: list[float] = field(default_factory=list)  # modules the first execute() imported


def measure_submit(args: argparse.Namespace, workdir: Path) -> Submit:
    result = Submit()
    cluster, _ = start_cluster(args.log_every)
    kubeconfig = cluster.write_kubeconfig(workdir / "submit.kubeconfig")
    requests = cluster.requests
    assert hasattr(requests, "between")
    try:
        for process in range(args.submit_processes):
            argv = [
                sys.executable,
                "-X",
                "importtime",  # the imports the first execute() pays are told apart
                str(CHILD),
                "submit",
                f"--prefix=submit-{process}",
                f"--conn-id={CONN_ID}",
                f"--calls={args.submit_calls}",
            ]
            child = Child(argv, child_env(kubeconfig), workdir / f"submit-{process}.stderr")
            imports = child.expect("imports", 300)
            result.interpreter_s.append(imports["booted"] - child.spawned)
            result.sdk_import_s.append(imports["sdk_s"])
            result.operator_import_s.append(imports["operator_s"])
            for call in range(args.submit_calls):
                done = child.expect("submitted", 120)
                timed = requests.between(done["began"], done["returned"] + 0.5)
                creates = [t for t, r in timed if r.method == "POST" and r.path.endswith("/pytorchjobs")]
                if not creates:
                    continue
                create = creates[0] - done["began"]
                back = done["returned"] - done["began"]
                result.requests_per_call.append(sum(1 for t, _ in timed if t <= done["returned"]))
                if call == 0:
                    result.first_create_s.append(create)
                    result.first_request_s.append(timed[0][0] - done["began"])
                    result.first_return_s.append(back)
                else:
                    result.warm_create_s.append(create)
                    result.warm_return_s.append(back)
            child.close()
            result.first_call_imports_s.append(imports_during_first_call(child.stderr_path.read_text()))
    finally:
        cluster.stop_thread()
    return result


def imports_during_first_call(stderr: str) -> float:
    """Seconds of (top-level) imports ``-X importtime`` logged between the first and the second execute()."""
    _, _, after = stderr.partition(f"{MARK} 0\n")
    first, _, _ = after.partition(f"{MARK} 1\n")
    total_us = 0
    for line in first.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2][1:]
        if not name.startswith(" "):  # nested imports are indented under the one that caused them
            total_us += int(parts[1])
    return total_us / 1e6


# -- report --------------------------------------------------------------------------------------------------


def mb(kb: float) -> str:
    return f"{kb / 1024:.0f}"


def report(runs: list[Measurement], submit: Submit | None, args: argparse.Namespace) -> None:
    load = os.getloadavg()
    print(
        f"\nscale.py: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load[0]:.2f} "
        f"{load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs; each replica logs a line every "
        f"{args.log_every:g} s; "
        f"polling every {args.poll_interval:g} s; steady window {args.window:g} s"
    )
    table(
        f"steady state (window after start-up settled + {args.settle:g} s)",
        f"{'N':>5} {'mode':<32} {'req/s (1-s bins: min-max, n)':<30} {'RSS MB before':>13} "
        f"{'steady (min-max, n)':<21} {'per job KB':>10}  {'CPU % (min-max, n)':<22} {'log lines/s':>11}",
    )
    for m in runs:
        rps = spread(m.steady_bins, "{:.1f}", m.steady_rps)
        rss = spread([v / 1024 for v in m.steady_rss_kb], "{:.0f}")
        cpu = spread(m.steady_cpu, "{:.0f}", m.steady_cpu_mean)
        print(
            f"{m.jobs:>5} {MODES[m.mode]:<32} {rps:<30} {mb(m.rss_before_kb):>13} {rss:<21} "
            f"{m.per_job_kb:>10.1f}  {cpu:<22} {m.steady_lines:>11.1f}"
        )
    print_marginal(runs)
    table(
        "start-up (all N triggers start at once, as after a triggerer restart) and status change to event",
        f"{'N':>5} {'mode':<32} {'start-up req':>12} {'armed s':>8} {'settled s':>9} {'lag max s':>9} "
        f"{'peak RSS MB':>11}  {'event ms p50':>12} {'p99':>7} {'max':>7} {'n':>5}  events",
    )
    for m in runs:
        lat = [v * 1000 for v in m.latencies]
        events = ", ".join(f"{k} {v}" for k, v in sorted(m.events.items()))
        extra = "; ".join(
            m.notes + ([f"{m.missing_write} without a status write"] if m.missing_write else [])
        )
        armed = "-" if m.subscribed_s is None else f"{m.subscribed_s:.1f}"
        settled = "-" if m.settled_s is None else f"{m.settled_s:.1f}"
        print(
            f"{m.jobs:>5} {MODES[m.mode]:<32} {m.startup_requests:>12} {armed:>8} {settled:>9} "
            f"{m.startup_lag_max:>9.2f} {mb(m.peak_rss_kb):>11}  {pct(lat, 0.5):>12.0f} "
            f"{pct(lat, 0.99):>7.0f} {max(lat, default=float('nan')):>7.0f} {len(lat):>5}  {events}"
            f"{' (' + extra + ')' if extra else ''}"
        )
    print("\nstatus change to event, split where localkube's server wrote the event to the watch (ms)")
    for m in runs:
        server = [v * 1000 for v in m.server_latencies]
        client = [v * 1000 for v in m.client_latencies]
        print(
            f"{m.jobs:>5} {MODES[m.mode]:<32} write->sent p50 {pct(server, 0.5):>7.0f} "
            f"p99 {pct(server, 0.99):>7.0f}   sent->event p50 {pct(client, 0.5):>7.0f} "
            f"p99 {pct(client, 0.99):>7.0f}  (n={len(client)})"
        )
    print("\nsteady requests by kind (whole window)")
    for m in runs:
        kinds = (
            ", ".join(f"{k} {v}" for k, v in sorted(m.steady_kinds.items(), key=lambda kv: -kv[1])) or "none"
        )
        print(f"{m.jobs:>5} {MODES[m.mode]:<32} {kinds}")
    print("\nstart-up requests by kind")
    for m in runs:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(m.startup_kinds.items(), key=lambda kv: -kv[1]))
        print(f"{m.jobs:>5} {MODES[m.mode]:<32} {kinds or 'none'}")
    print(
        "\nset-up (not part of the figures): creating the jobs until all pods ran; "
        "the trigger process's imports"
    )
    for m in runs:
        print(f"{m.jobs:>5} {MODES[m.mode]:<32} jobs {m.setup_s:6.1f} s   imports {m.import_s:5.1f} s")
    if submit is not None:
        print_submit(submit)


def table(title: str, head: str) -> None:
    print(f"\n{title}\n{head}\n{'-' * len(head)}")


def print_marginal(runs: list[Measurement]) -> None:
    """RSS growth per added job between the sizes measured: free of the process's fixed start-up cost."""
    lines = []
    for mode in MODES:
        sized = sorted((m for m in runs if m.mode == mode and m.steady_rss_kb), key=lambda m: m.jobs)
        steps = [
            f"N {a.jobs}->{b.jobs}: "
            f"{(median(b.steady_rss_kb) - median(a.steady_rss_kb)) / (b.jobs - a.jobs):.1f}"
            for a, b in itertools.pairwise(sized)
        ]
        if steps:
            lines.append(f"      {MODES[mode]:<32} {', '.join(steps)}")
    if lines:
        print("\nmarginal RSS per added job, KB (steady medians)")
        print("\n".join(lines))


def print_submit(s: Submit) -> None:
    ms = "{:.0f}"
    print(
        "\nsubmit: TrainingJobOperator.execute() (deferrable) entry to the job's create request at the "
        "server, ms"
    )
    rows = [
        ("first call in a fresh process: to create", s.first_create_s),
        ("  to its first request", s.first_request_s),
        ("  to TaskDeferred", s.first_return_s),
        ("  of which imports inside execute()", s.first_call_imports_s),
        ("warm (later calls, same process): to create", s.warm_create_s),
        ("  to TaskDeferred", s.warm_return_s),
        ("fresh process: interpreter start", s.interpreter_s),
        ("  import airflow.sdk", s.sdk_import_s),
        ("  then import the operator module", s.operator_import_s),
    ]
    for label, values in rows:
        print(f"  {label:<46} {spread([v * 1000 for v in values], ms)}")
    print(f"  requests per call: {spread([float(v) for v in s.requests_per_call], '{:.0f}')}")


# -- profile -------------------------------------------------------------------------------------------------


def run_profile(args: argparse.Namespace, workdir: Path) -> None:
    out = workdir / "profile"
    out.mkdir()
    jobs = args.profile_jobs
    m = measure(args.profile_mode, jobs, args, workdir, profile=out)
    report([m], None, args)
    print(
        f"\nprofile of {MODES[args.profile_mode]} at N={jobs} (cProfile over the whole loop; tracemalloc at "
        "the steady window)\n"
    )
    argv = [sys.executable, str(CHILD), "ssl-cost"]
    cost = subprocess.run(argv, capture_output=True, text=True, check=True)
    print(json.loads(cost.stdout)["text"] + " (a fresh process)\n")
    for name in ("memory.txt", "cpu-tottime.txt", "cpu-cumulative.txt", "cpu-ssl-callers.txt"):
        path = out / name
        print(f"==> {name}")
        print(trim_pstats(path.read_text()) if path.exists() else "(not written: the child stopped early)")


def trim_pstats(text: str) -> str:
    """pstats output without its long header paths."""
    return "\n".join(
        line.replace(sys.prefix + "/lib/python3.11/site-packages/", "") for line in text.splitlines()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs", default="100,500,1000", help="comma-separated N list (default 100,500,1000)"
    )
    parser.add_argument(
        "--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}"
    )
    parser.add_argument("--window", type=float, default=20.0, help="steady window, s (default 20)")
    parser.add_argument(
        "--settle", type=float, default=3.0, help="wait after start-up settled, s (default 3)"
    )
    parser.add_argument("--settle-max", type=float, default=20.0, help="longest wait for a quiet loop, s")
    parser.add_argument("--startup-timeout", type=float, default=240.0)
    parser.add_argument("--setup-timeout", type=float, default=600.0)
    parser.add_argument("--event-timeout", type=float, default=60.0, help="after the last flip, s")
    parser.add_argument("--flip-rate", type=float, default=100.0, help="jobs ended per second (100)")
    parser.add_argument("--log-every", type=float, default=5.0, help="each replica logs a line every ... s")
    parser.add_argument("--poll-interval", type=float, default=10.0, help="polling baselines' interval, s")
    parser.add_argument("--sample", type=float, default=0.5, help="trigger process sample interval, s")
    parser.add_argument("--submit-processes", type=int, default=5, help="fresh processes for submit latency")
    parser.add_argument("--submit-calls", type=int, default=4, help="execute() calls per process")
    parser.add_argument("--no-submit", action="store_true", help="skip the submit latency")
    parser.add_argument("--profile", action="store_true", help="profile the logs mode instead")
    parser.add_argument("--profile-jobs", type=int, default=300)
    parser.add_argument("--profile-mode", default="hub-logs", choices=list(MODES), help="(hub-logs)")
    parser.add_argument("--json", help="also write every figure here")
    scale_real.add_arguments(parser)
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"--modes: unknown {', '.join(sorted(unknown))}; expected some of {', '.join(MODES)}")
    sizes = [int(n) for n in args.jobs.split(",") if n.strip()]
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        if args.profile:
            run_profile(args, Path(tmp))
            return
        if args.server == "real":
            explicit = args.modes != ",".join(MODES)
            hub_modes = [m for m in modes if m in STREAMS_PER_JOB] if explicit else list(STREAMS_PER_JOB)
            if explicit and hub_modes != modes:
                parser.error(f"--server real measures the hub modes only ({', '.join(STREAMS_PER_JOB)})")
            real = []
            for jobs in sizes:
                for mode in hub_modes:
                    print(f"... {MODES[mode]}, N={jobs}, real server", file=sys.stderr, flush=True)
                    real.append(measure_real(mode, jobs, args, Path(tmp)))
            report_real(real, args)
            if args.json:
                Path(args.json).write_text(json.dumps({"runs": [m.__dict__ for m in real]}, indent=1))
            return
        runs = []
        for jobs in sizes:
            for mode in modes:
                print(f"... {MODES[mode]}, N={jobs}", file=sys.stderr, flush=True)
                runs.append(measure(mode, jobs, args, Path(tmp)))
        submit = None if args.no_submit else measure_submit(args, Path(tmp))
        report(runs, submit, args)
        if args.json:
            payload = {"runs": [m.__dict__ for m in runs], "submit": submit.__dict__ if submit else None}
            Path(args.json).write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
