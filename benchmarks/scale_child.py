"""The trigger process of ``scale.py``: a fresh interpreter that runs N triggers on one event loop, as a
triggerer does, and reports what it sees as JSON lines on its stdout. Not meant to be run by hand.

``triggers`` mode: build the N triggers (each through a serialize/deserialize round trip), report the RSS,
wait for ``go`` on stdin, then run every trigger's ``run()`` to its first event on one loop (each under a
greenback portal, as the triggerer's ``run_trigger``). Every ``--sample`` seconds it reports its RSS
(``/proc/self/status`` VmRSS), its CPU time (``os.times``), the longest event-loop lag since the last
sample, and the replica log lines its triggers' logs received; each event is reported as it happens.
``stop`` on stdin cancels what is left. ``--profile DIR``: cProfile over the loop, and on ``snapshot`` a
tracemalloc diff against the moment before the triggers started plus a census of live objects, written to
DIR.

``submit`` mode: time the imports, then call ``TrainingJobOperator.execute()`` (deferrable, so it returns
by raising ``TaskDeferred`` once the job is created) ``--calls`` times, reporting when each call began.
"""

from __future__ import annotations

import time

BOOTED = time.monotonic()  # before any heavy import: the parent subtracts its spawn time

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

_OUT = os.fdopen(os.dup(1), "w", buffering=1)
sys.stdout = sys.stderr  # nothing but our JSON lines on the real stdout
REPLICA_LINE = re.compile(rb'(?:"event":"|\\n)\[[^\]"]+\] step \d+ ')  # a record may hold several
LAG_TICK = 0.05


def send(kind: str, **fields: Any) -> None:
    _OUT.write(json.dumps({"type": kind, **fields}) + "\n")


def rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


class CountingSink:
    """Where every log record goes, rendered by Airflow's own logging set-up (JSON lines, as the
    triggerer's trigger logs are): counted and dropped; replica log lines (``[master-0] step 3``) apart."""

    def __init__(self) -> None:
        self.records = 0
        self.replica_lines = 0

    def write(self, data: bytes | str) -> int:
        raw = data.encode() if isinstance(data, str) else data
        self.records += raw.count(b"\n")
        self.replica_lines += len(REPLICA_LINE.findall(raw))
        return len(data)

    def flush(self) -> None:
        pass


# Modules a trigger of each mode imports when it first runs: imported before the RSS baseline is read, so
# that the per-job figure is what the triggers hold and not one-off import cost.
HUB_MODES = ("hub", "hub-logs", "hub-deciding")
PRELOAD = {
    "sdk-poll": ("kubernetes_asyncio.client", "kubernetes_asyncio.config"),
    "cncf-poll": ("airflow.providers.cncf.kubernetes.hooks.kubernetes", "kubernetes_asyncio.client"),
    "floor": (),
}


def preload(mode: str) -> tuple[str, ...]:
    """What to import for ``mode`` before the baseline. The hub modes: what ``TrainingJobTrigger`` imports off
    the loop when it first runs (its ``RUNTIME_MODULES``), and the connection lookup's modules, the Task SDK's
    supervisor among them (a triggerer has imported those: it runs that supervisor); counted per job, those
    one-off imports were 2.3 of the 19.4 KiB traced per trigger at N = 300."""
    if mode not in HUB_MODES:
        return PRELOAD[mode]
    from airflow_provider_training.triggers.training import RUNTIME_MODULES

    lookup = ("airflow.providers.common.compat.connection", "airflow.sdk.execution_time.supervisor")
    return (*RUNTIME_MODULES, *lookup)


# -- the triggers --------------------------------------------------------------------------------------------


def build_triggers(args: argparse.Namespace) -> list[Any]:
    """The mode's N triggers, each rebuilt from its serialized form as the triggerer does."""
    from airflow_provider_training.kinds.registry import get_kind

    kind = get_kind("PyTorchJob")
    names = [f"{args.prefix}-{i:04d}" for i in range(args.jobs)]
    if args.mode in ("hub", "hub-logs", "hub-deciding"):
        from airflow_provider_training.triggers.training import TrainingJobTrigger

        built: list[Any] = [
            TrainingJobTrigger(
                kind=kind.kind,
                api_version=kind.api_version,
                job_name=name,
                namespace=args.namespace,
                kubernetes_conn_id=args.conn_id,
                get_logs=args.mode != "hub",
                log_replicas="all" if args.mode == "hub-logs" else "deciding",
            )
            for name in names
        ]
    elif args.mode == "floor":
        import scale_baselines

        built = [scale_baselines.IdleTrigger(job_name=name) for name in names]
    else:
        import scale_baselines

        cls = (
            scale_baselines.SdkPollingTrigger
            if args.mode == "sdk-poll"
            else scale_baselines.CncfStylePollingTrigger
        )
        scale_baselines.SdkPollingTrigger.kubeconfig = args.kubeconfig
        scale_baselines.CncfStylePollingTrigger.kubernetes_conn_id = args.conn_id
        resource = kind.resource
        built = [
            cls(
                group=resource.group,
                version=resource.version,
                plural=resource.plural,
                job_name=name,
                namespace=args.namespace,
                poll_interval=args.poll_interval,
            )
            for name in names
        ]
    return [round_trip(trigger) for trigger in built]


def round_trip(trigger: Any) -> Any:
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))


class Runner:
    def __init__(self, triggers: list[Any], handler: CountingSink, args: argparse.Namespace) -> None:
        self.triggers, self.handler, self.args = triggers, handler, args
        self.lag_max = 0.0
        self.gc_max = 0.0  # the longest garbage collection since the last sample, s
        self.gc_began = 0.0
        gc.callbacks.append(self.time_collection)
        self.events = 0
        self.stop = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def run_trigger(self, trigger: Any) -> None:
        import greenback

        await greenback.ensure_portal()  # as the triggerer's run_trigger does (unless disabled)
        events = trigger.run()
        try:
            event = await anext(events)
        finally:
            await events.aclose()
        self.events += 1
        send(
            "event",
            name=trigger.job_wait.job.name,
            t=time.monotonic(),
            status=str(event.payload.get("status")),
        )

    def time_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.gc_began = time.perf_counter()
        else:
            self.gc_max = max(self.gc_max, time.perf_counter() - self.gc_began)

    async def watch_lag(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(LAG_TICK)
            self.lag_max = max(self.lag_max, time.monotonic() - before - LAG_TICK)

    async def sample(self) -> None:
        while True:
            await asyncio.sleep(self.args.sample)
            lag, self.lag_max = self.lag_max, 0.0
            collection, self.gc_max = self.gc_max, 0.0
            send(
                "sample",
                t=time.monotonic(),
                rss_kb=rss_kb(),
                cpu_s=cpu_seconds(),
                lag=lag,
                gc=collection,
                records=self.handler.records,
                lines=self.handler.replica_lines,
                events=self.events,
                timers=len(getattr(asyncio.get_running_loop(), "_scheduled", ())),
                tasks=len(asyncio.all_tasks()),
            )

    async def main(self) -> None:
        self.loop = asyncio.get_running_loop()
        helpers = [asyncio.create_task(self.watch_lag()), asyncio.create_task(self.sample())]
        send("started", t=time.monotonic())
        tasks = [asyncio.create_task(self.run_trigger(t)) for t in self.triggers]
        everything = asyncio.gather(*tasks, return_exceptions=True)
        stopped = asyncio.create_task(self.stop.wait())
        await asyncio.wait([everything, stopped], return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        results = await everything
        failures = Counter(type(r).__name__ for r in results if isinstance(r, BaseException))
        for helper in helpers:
            helper.cancel()
        send("done", t=time.monotonic(), events=self.events, failures=dict(failures))


def read_commands(runner: Runner, profiler: Profiler | None) -> None:
    for line in sys.stdin:
        command = line.strip()
        if command == "stop" and runner.loop is not None:
            runner.loop.call_soon_threadsafe(runner.stop.set)
        elif command == "snapshot" and profiler is not None and runner.loop is not None:
            asyncio.run_coroutine_threadsafe(profiler.on_loop_snapshot(len(runner.triggers)), runner.loop)


class Profiler:
    """cProfile over the loop; tracemalloc from just before the triggers start; a census on ``snapshot``."""

    def __init__(self, out: Path) -> None:
        import cProfile
        import tracemalloc

        self.out = out
        self.tracemalloc = tracemalloc
        tracemalloc.start(12)
        self.before_types = census()
        self.before = tracemalloc.take_snapshot()
        self.profile = cProfile.Profile()

    async def on_loop_snapshot(self, triggers: int) -> None:
        self.profile.disable()  # the snapshot's own work is not the triggers'
        try:
            self.snapshot(triggers)
        finally:
            self.profile.enable()
        send("snapshotted", t=time.monotonic())

    def snapshot(self, triggers: int) -> None:
        after = self.tracemalloc.take_snapshot()
        types = census()
        filters = [self.tracemalloc.Filter(False, self.tracemalloc.__file__)]
        diff = after.filter_traces(filters).compare_to(self.before.filter_traces(filters), "traceback")
        growth = sum(stat.size_diff for stat in diff)
        lines = [
            f"tracemalloc: {growth / 1024:.0f} KiB allocated and still live since the triggers started, "
            f"{growth / 1024 / triggers:.1f} KiB per trigger ({triggers} triggers)",
            "",
            "top allocation sites (size still live; the innermost frames of ours, kubernetes_asyncio, "
            "aiohttp, ssl, asyncio):",
        ]
        for stat in diff[:25]:
            frames = [f for f in stat.traceback if _interesting(f.filename)][-6:]
            lines.append(
                f"  {stat.size_diff / 1024:9.0f} KiB  {stat.count_diff:7d} blocks  "
                f"{stat.size_diff / triggers / 1024:6.1f} KiB/trigger"
            )
            lines += [f"      {_short(f.filename)}:{f.lineno}" for f in reversed(frames)]
        parts: Counter[str] = Counter()
        sites: dict[str, Counter[str]] = {}
        for stat in diff:
            part = part_of([f.filename for f in stat.traceback])
            parts[part] += stat.size_diff
            inner = stat.traceback[-1]  # tracebacks are oldest frame first
            sites.setdefault(part, Counter())[f"{_short(inner.filename)}:{inner.lineno}"] += stat.size_diff
        lines += ["", "still live per trigger, by part (an allocation's innermost frame of a known part):"]
        for part, size in parts.most_common():
            lines.append(f"  {size / 1024 / triggers:6.1f} KiB/trigger  {part}")
            for site, at in sites[part].most_common(4):  # where in that part, by the allocating line
                lines.append(f"        {at / 1024 / triggers:6.2f}  {site}")
        lines += ["", *hub_cache_lines(triggers)]
        grown = {k: types[k] - self.before_types.get(k, 0) for k in types}
        lines += ["", "live objects per trigger of the kinds that hold a client, a stream or a timer:"]
        for name, count in sorted(grown.items()):
            if any(key in name for key in WATCHED_TYPES) and count:
                lines.append(f"  {count / triggers:8.2f}  {name}  ({count})")
        lines += ["", "live objects per trigger, the 25 most grown types (gc census):"]
        for name, count in sorted(grown.items(), key=lambda kv: -kv[1])[:25]:
            lines.append(f"  {count / triggers:8.2f}  {name}  ({count})")
        (self.out / "memory.txt").write_text("\n".join(lines) + "\n")

    def write_cpu(self) -> None:
        import io
        import pstats

        for order in ("tottime", "cumulative"):
            text = io.StringIO()
            stats = pstats.Stats(self.profile, stream=text)
            stats.sort_stats(order).print_stats(35)
            (self.out / f"cpu-{order}.txt").write_text(text.getvalue())
        text = io.StringIO()
        stats = pstats.Stats(self.profile, stream=text)
        stats.sort_stats("cumulative").print_callers(
            r"load_verify_locations|set_default_verify_paths|create_default_context"
        )
        (self.out / "cpu-ssl-callers.txt").write_text(text.getvalue())


WATCHED_TYPES = (
    "SSLContext",
    "ClientSession",
    "TCPConnector",
    "ApiClient",
    "RESTClientObject",
    "Configuration",
    "Hook",
    "Transport",
    "Streamer",
    "logs._Pod",
    "LogCursor",
    "JobWaiter",
    "TimerHandle",
    "_asyncio.Task",
    "greenlet",
    "ClientResponse",
    "StreamReader",
)


def part_of(files: list[str]) -> str:
    """Which part of a triggerer an allocation belongs to, by the innermost frame of a known part (its
    traceback, oldest frame first)."""
    provider = "airflow_provider_training/"
    for name in reversed(files):
        if provider + "slim.py" in name:
            return "hub cache (the objects, as kept)"
        if provider + "hooks/transport.py" in name:
            hub = any("watch.py" in f for f in files)
            return "hub cache (the objects, as decoded)" if hub else "log streams"
        if "aiohttp" in name:
            return "log streams"
        if provider + "logs.py" in name:
            return "log streamer (per pod: state, cursor, task)"
        if provider + "watch.py" in name or provider + "subscribers.py" in name:
            return "hub subscriptions and index"
        if provider + "waiting.py" in name or provider + "kinds/" in name:
            return "JobWaiter (its state, queue, status)"
        if provider in name:
            return "provider, other (trigger, hook, connection, off-loop import)"
        if "greenback" in name:
            return "greenback portal (the triggerer's, per trigger)"
        if "scale_child" in name:
            return "the harness's run_trigger task (the triggerer's part)"
        if "site-packages/airflow/" in name:
            return "Airflow"
    return "other"


def hub_cache_lines(triggers: int) -> list[str]:
    """What the loop's watch hub holds in its caches, per shared watch: objects and their deep size (every
    dict, list and string reached, each counted once across all of them), per trigger."""
    from airflow_provider_training.watch import WatchHub

    lines = ["the watch hub's cached objects (deep size, shared strings counted once):"]
    seen: set[int] = set()
    for (_, scope), watch in WatchHub.shared()._watches.items():
        size = sum(deep_size(obj, seen) for obj in watch.objects.values())
        label = watch.resource.plural + (f" labelled {scope}" if scope else "")
        per = size / 1024 / triggers
        count = len(watch.objects)
        lines.append(f"  {size / 1024:9.0f} KiB  {count:6d} objects  {per:6.1f} KiB/trigger  {label}")
    return lines


def deep_size(value: Any, seen: set[int]) -> int:
    """``sys.getsizeof`` of ``value`` and of everything it holds (JSON-shaped), each object once."""
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in value.items())
    elif isinstance(value, list | tuple):
        size += sum(deep_size(v, seen) for v in value)
    return size


def ssl_context_cost(count: int = 40) -> str:
    """What one SSL context costs as kubernetes_asyncio's RESTClientObject builds it (in every ApiClient):
    ``ssl.create_default_context(cafile=configuration.ssl_ca_cert)``, which loads the system CA store when
    no CA file is given, even for a plain-HTTP server. Native memory: tracemalloc does not see it."""
    import ssl

    gc.collect()
    rss, cpu = rss_kb(), cpu_seconds()
    kept = [ssl.create_default_context(cafile=None) for _ in range(count)]
    per_kb, per_ms = (rss_kb() - rss) / count, (cpu_seconds() - cpu) * 1000 / count
    del kept
    return (
        f"one ssl.create_default_context() (as every kubernetes_asyncio ApiClient makes): {per_kb:.0f} KB of "
        f"RSS and {per_ms:.1f} ms of CPU (mean of {count}, kept alive)"
    )


def _interesting(filename: str) -> bool:
    return any(
        part in filename
        for part in (
            "airflow_provider_training",
            "kubernetes_asyncio",
            "aiohttp",
            "ssl",
            "asyncio",
            "greenback",
            "scale_",
        )
    )


def _short(filename: str) -> str:
    for marker in ("site-packages/", "python3.11/", "benchmarks/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def census() -> Counter[str]:
    gc.collect()
    return Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())


def time_log_stops() -> None:
    """Report each job's ``ReplicaLogStreamer.stop()`` (what the waiter awaits before it builds the event: the
    follows cancelled, then the final reads) as a ``stop`` line: when it began and ended, and how long each
    log read it made took (send to body read). Wraps the class's methods in this process only; the provider
    is not changed."""
    from airflow_provider_training.logs import ReplicaLogStreamer

    if not hasattr(ReplicaLogStreamer, "_read"):
        return  # a streamer without this step: its stop() is not split
    stop, read = ReplicaLogStreamer.stop, ReplicaLogStreamer._read
    reads: dict[int, list[float]] = {}

    async def timed_read(self: Any, pod: Any, *, previous: bool = False) -> None:
        began = time.monotonic()
        try:
            await read(self, pod, previous=previous)
        finally:
            if self._stopping:
                reads.setdefault(id(self), []).append(time.monotonic() - began)

    async def timed_stop(self: Any) -> list[str]:
        began = time.monotonic()
        try:
            return await stop(self)
        finally:
            made = reads.pop(id(self), [])
            send("stop", name=self.job_name, began=began, ended=time.monotonic(), reads=made)

    ReplicaLogStreamer._read = timed_read  # type: ignore[method-assign]
    ReplicaLogStreamer.stop = timed_stop  # type: ignore[method-assign]


def run_triggers(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import airflow.sdk  # noqa: F401  (what a triggerer has imported anyway)

    imported = time.monotonic()
    from airflow.sdk.log import configure_logging

    handler = CountingSink()
    configure_logging(json_output=True, output=handler)  # type: ignore[arg-type]
    for module in preload(args.mode):
        importlib.import_module(module)
    import greenback  # noqa: F401

    triggers = build_triggers(args)
    if args.mode in ("hub-logs", "hub-deciding"):
        time_log_stops()
    gc.collect()
    profiler = Profiler(Path(args.profile)) if args.profile else None
    import airflow_provider_training

    send(
        "ready",
        t=time.monotonic(),
        import_s=imported - BOOTED,
        rss_kb=rss_kb(),
        cpu_s=cpu_seconds(),
        provider=airflow_provider_training.__file__,
    )
    if sys.stdin.readline().strip() != "go":
        return
    runner = Runner(triggers, handler, args)
    threading.Thread(target=read_commands, args=(runner, profiler), daemon=True).start()
    if profiler is not None:
        profiler.profile.enable()
    try:
        asyncio.run(runner.main())
    finally:
        if profiler is not None:
            profiler.profile.disable()
            profiler.write_cpu()


# -- submit --------------------------------------------------------------------------------------------------


def run_submit(args: argparse.Namespace) -> None:
    import airflow.sdk  # noqa: F401

    sdk_done = time.monotonic()
    from airflow_provider_training.operators.training import TrainingJobOperator

    op_done = time.monotonic()
    send("imports", booted=BOOTED, sdk_s=sdk_done - BOOTED, operator_s=op_done - sdk_done)
    from airflow.sdk.exceptions import TaskDeferred

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from scale_manifest import MARK, job_manifest

    for call in range(args.calls):
        name = f"{args.prefix}-{call}"
        op = TrainingJobOperator(
            task_id=f"train_{call}",
            job=job_manifest(name),
            kubernetes_conn_id=args.conn_id,
            deferrable=True,
            get_logs=True,
            log_replicas="all",
        )
        context = _context(name)
        print(f"{MARK} {call}", file=sys.stderr, flush=True)  # -X importtime lines after it: this call's
        began = time.monotonic()
        with contextlib.suppress(TaskDeferred):
            op.execute(context)  # type: ignore[arg-type]
        send("submitted", call=call, began=began, returned=time.monotonic(), name=name)


def _context(run: str) -> dict[str, Any]:
    from dataclasses import dataclass, field
    from datetime import UTC, datetime

    @dataclass
    class TaskInstance:  # the attributes the operator reads (tests/operators/harness.py has the same)
        dag_id: str = "scale_bench"
        task_id: str = "train"
        run_id: str = f"manual__{run}"
        map_index: int = -1
        try_number: int = 1
        start_date: datetime = field(default_factory=lambda: datetime.now(UTC))

        def xcom_push(self, key: str, value: Any) -> None:
            pass

    class Store(dict):
        def set(self, key: str, value: Any, *, retention: Any = None) -> None:
            self[key] = value

        def delete(self, key: str) -> None:
            self.pop(key, None)

    ti = TaskInstance()
    return {"ti": ti, "run_id": ti.run_id, "task_state_store": Store()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("triggers", "submit", "ssl-cost"))
    parser.add_argument("--mode", default="hub")
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--prefix", default="bench")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--conn-id", default="")
    parser.add_argument("--kubeconfig", default="")
    parser.add_argument("--poll-interval", type=float, default=10.0)
    parser.add_argument("--sample", type=float, default=0.5)
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--profile", default="")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.what == "ssl-cost":  # in a process of its own: freed memory of earlier contexts would be reused
        send("ssl-cost", text=ssl_context_cost())
        return
    (run_triggers if args.what == "triggers" else run_submit)(args)


if __name__ == "__main__":
    main()
