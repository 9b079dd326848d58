"""How long TrainingJobTriggers hold the triggerer's event loop: a loop-lag probe, against localkube.

Two scenarios, each run in a fresh interpreter (so the first imports count) set up as a triggerer's trigger
runner is (Airflow's JSON log channel, ``TriggerRunner.run_trigger`` driving each trigger, the trigger class
imported by its classpath on the loop), with replica log streaming on:

- ``start``: ``--jobs`` (200) triggers start at once, as after a triggerer restart, each following a running
  one-replica PyTorchJob whose master writes log lines until it succeeds, 10 to 20 s in;
- ``backlog``: one trigger attaches to a job whose master already wrote ``--lines`` (100,000) lines, and
  replays them: ``running`` (the pod still runs: the followed stream) and ``finished`` (the job already
  succeeded: the final read).

A probe task sleeps 5 ms in a loop and records how late it wakes: the loop lag, i.e. how long the loop ran
other work before it could run the probe. localkube runs in this (parent) process, the triggers in the child.

    python benchmarks/loop_lag.py [--jobs 200] [--lines 100000] [--baseline REF] [--scenario start ...]

``--baseline REF`` (default: the commit before the loop-lag fixes) also runs every scenario on that commit's
code, exported once into a cache (``baseline.py``) and put first on the child's ``PYTHONPATH``;
``--baseline ''`` skips it. ``child`` is the internal entry point of the fresh interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BASELINE_REF = "3c505fd"  # the last commit before the loop-lag fixes (issue 8, point 5)
CONN_ID = "loop_lag"
NAMESPACE = "default"
CLASSPATH = "airflow_provider_training.triggers.training.TrainingJobTrigger"
PROBE_INTERVAL = 0.005
BACKLOG_JOB = "backlog"
# Deployments run compiled bytecode (pip and the Airflow images compile it at install); without it every
# first import compiles from source, holding the GIL for the whole compile of a module (0.7 s for the
# client's core_v1_api) even in a worker thread. The children write and reuse theirs here.
PYCACHE = Path(tempfile.gettempdir()) / "loop-lag-pycache"


# -- the child: a fresh interpreter set up as a triggerer's trigger runner -----------------------------------


class LoopProbe:
    """Samples the loop's lag: how much later than asked a ``PROBE_INTERVAL`` sleep wakes up."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.at: list[float] = []  # when each sample woke up (perf_counter)
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(PROBE_INTERVAL)
            woke = time.perf_counter()
            self.lags.append(max(0.0, woke - start - PROBE_INTERVAL))
            self.at.append(woke)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag probe")

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class CountingLog(io.FileIO):
    """The trigger runner's log channel (a file here); counts the replica log lines the triggers log."""

    def __init__(self, path: Path, expected: int) -> None:
        super().__init__(path, "wb")
        self.count = 0
        self.expected = expected
        self.all_seen = asyncio.Event()
        self.first_at: float | None = None
        self.all_seen_at: float | None = None

    def write(self, data: Any) -> int:
        if b'"event":"[' in data:  # a JSON log line whose message starts with "[<replica>] "
            self.count += data.count(b"\\n[") + 1  # a record holds the lines of one read, each prefixed
            self.first_at = self.first_at or time.perf_counter()
            if self.count >= self.expected and not self.all_seen.is_set():
                self.all_seen_at = time.perf_counter()
                self.all_seen.set()
        return super().write(data)


class StepClock:
    """Times every step the loop runs (a callback, or a task's run up to its next ``await`` that suspends) in
    the loop thread's CPU time: what a step computes, whatever the machine's load adds to its wall time."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.longest = 0.0
        self.over: list[str] = []  # the steps that computed for more than ``limit`` seconds
        self.top: list[tuple[float, str]] = []  # the 3 longest steps: (seconds, what ran)

    def install(self) -> None:
        run = asyncio.events.Handle._run
        clock = self

        def timed(handle: asyncio.Handle) -> None:
            began = time.thread_time()
            try:
                run(handle)
            finally:
                spent = time.thread_time() - began
                clock.longest = max(clock.longest, spent)
                if len(clock.top) < 3 or spent > clock.top[0][0]:
                    clock.top = sorted([*clock.top, (spent, _step_name(handle))])[-3:]
                if spent > clock.limit:
                    clock.over.append(f"{_step_name(handle)} computed {spent:.3f} s")

        asyncio.events.Handle._run = timed  # type: ignore[method-assign]


class GcClock:
    """Times every garbage collection of the process (``gc.callbacks``): a full collection walks every
    tracked object, so with a large heap it is a loop stall of its own, inside whichever step triggered it."""

    def __init__(self) -> None:
        self.longest = (0.0, -1)  # (seconds, generation)
        self.full = 0  # generation-2 collections
        self._began = 0.0

    def install(self) -> None:
        import gc

        def callback(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                self._began = time.perf_counter()
                return
            spent = time.perf_counter() - self._began
            self.full += info["generation"] == 2
            if spent > self.longest[0]:
                self.longest = (spent, info["generation"])

        gc.callbacks.append(callback)


def _step_name(handle: asyncio.Handle) -> str:
    """A task step as the task's name and where it is suspended now (the await that ended the step)."""
    task = getattr(getattr(handle, "_callback", None), "__self__", None)
    if not isinstance(task, asyncio.Task):
        return str(handle)[:240]
    where, awaited = "", task.get_coro()
    while (frame := getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)) is not None:
        where = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} {frame.f_code.co_name}"
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    return f"task {task.get_name()!r}, then suspended at {where}"


class SlowSteps(logging.Handler):
    """Collects asyncio debug mode's warnings "Executing <handle> took N seconds" (a step over the limit)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.steps: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Executing "):
            self.steps.append(message if len(message) < 300 else f"{message[:200]} ... {message[-60:]}")


def _configure_trigger_runner_logging(output: CountingLog) -> None:
    """What the triggerer's subprocess does (``_configure_logs_over_json_channel``), to a file."""
    from airflow.sdk.log import configure_logging, reset_logging

    reset_logging()
    configure_logging(json_output=True, output=output, sending_to_supervisor=True)


async def _run_triggers(args: argparse.Namespace, counter: CountingLog) -> dict[str, Any]:
    from airflow.jobs.triggerer_job_runner import TriggerRunner

    loop = asyncio.get_running_loop()
    if args.debug_slow is not None:
        loop.set_debug(True)
        loop.slow_callback_duration = args.debug_slow
    probe = LoopProbe()
    probe.start()
    await asyncio.sleep(0.2)  # the probe's baseline: an idle loop
    runner = TriggerRunner()
    fresh = "aiohttp" not in sys.modules
    started = time.perf_counter()
    tasks = []
    for trigger_id, name in enumerate(args.names):  # as TriggerRunner.create_triggers does
        await asyncio.sleep(0)
        trigger_class = runner.get_trigger_by_classpath(CLASSPATH)  # the first one imports the module
        await asyncio.sleep(0)
        trigger = trigger_class(
            kind="PyTorchJob",
            api_version="kubeflow.org/v1",
            job_name=name,
            namespace=NAMESPACE,
            kubernetes_conn_id=CONN_ID,
            get_logs=True,
        )
        trigger.trigger_id = trigger_id
        runner.triggers[trigger_id] = {"name": f"ID {trigger_id}", "events": 0, "is_watcher": False}
        task = asyncio.create_task(runner.run_trigger(trigger_id, trigger), name=f"ID {trigger_id}")
        runner.triggers[trigger_id]["task"] = task
        tasks.append(task)
    if args.cancel_after_lines:  # a still running job: stop once its backlog is replayed
        await asyncio.wait_for(counter.all_seen.wait(), args.timeout)
        for task in tasks:
            task.cancel()
    done, pending = await asyncio.wait(tasks, timeout=args.timeout)
    ended = time.perf_counter()
    for task in pending:
        task.cancel()
    await asyncio.sleep(0.2)
    await probe.stop()
    statuses: dict[str, int] = {}
    for entry in runner.events:
        status = str(entry.event.payload["status"])
        statuses[status] = statuses.get(status, 0) + 1
    if args.cancel_after_lines:
        statuses["cancelled after the backlog"] = sum(1 for t in done if t.cancelled())
    if pending:
        statuses["still running at the timeout"] = len(pending)
    worst = sorted(range(len(probe.lags)), key=probe.lags.__getitem__)[-5:]
    return {
        "lags": probe.lags,
        "fresh": fresh,  # neither aiohttp nor the Kubernetes client was imported before the triggers ran
        "worst": [(round(probe.at[i] - started, 3), round(probe.lags[i], 3)) for i in reversed(worst)],
        "events": statuses,
        "lines": counter.count,
        "seconds": ended - started,
        # From the first replica line logged to the last: the replay's time per line.
        "lines_seconds": (counter.all_seen_at - counter.first_at) if counter.all_seen_at else None,
    }


def child(args: argparse.Namespace) -> None:
    import airflow.jobs.triggerer_job_runner  # noqa: F401  (loaded in every triggerer before any trigger)

    counter = CountingLog(Path(args.log_file), args.expected_lines)
    _configure_trigger_runner_logging(counter)
    slow = SlowSteps()
    logging.getLogger("asyncio").addHandler(slow)
    clock = StepClock(args.step_limit)
    clock.install()
    collections = GcClock()
    collections.install()
    if args.profile:  # cProfile of the loop's thread (the import and TLS threads are not in it)
        import cProfile

        with cProfile.Profile() as profile:
            result = asyncio.run(_run_triggers(args, counter))
        profile.dump_stats(args.profile)
    else:
        result = asyncio.run(_run_triggers(args, counter))
    result["slow_steps"] = slow.steps
    result["longest_step"] = clock.longest
    result["longest_gc"] = list(collections.longest)
    result["full_gcs"] = collections.full
    result["steps_over_limit"] = clock.over
    result["longest_steps"] = [f"{spent * 1000:.0f} ms: {what}" for spent, what in reversed(clock.top)]
    print("RESULT " + json.dumps(result), flush=True)


# -- the parent: localkube, the jobs, and a child per scenario and code version ------------------------------


def _master_script(seconds: float | None, lines: list[str]) -> dict[str, Any]:
    return {"Master": {"duration": seconds, "logs": lines, "exit_code": 0}}


def _job(name: str) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}
        },
    }


def _log_line(i: int) -> str:
    return f"epoch {i // 1000} step {i} loss {1 / (1 + i * 1e-3):.6f} lr 0.0010 throughput 1843.2 samples/s"


class Cluster:
    """localkube in a thread of this process, and the jobs of one scenario."""

    def __init__(self, workdir: Path) -> None:
        from localkube.cluster import LocalKube
        from localkube.pytest_plugin import connection_json

        self.kube = LocalKube(runtime="scripted").start_in_thread()
        kubeconfig = self.kube.write_kubeconfig(workdir / "localkube.kubeconfig")
        self.conn_json = connection_json(kubeconfig, NAMESPACE)
        self.jobs = self.kube.store.resource_type("kubeflow.org", "v1", "pytorchjobs")

    def create(self, name: str, script: dict[str, Any]) -> None:
        from localkube.runtime import register_script

        register_script(name, script, NAMESPACE)
        self.kube.call(self.kube.store.create, self.jobs, NAMESPACE, _job(name))

    def log_length(self, name: str) -> int:
        instances = self.kube.logs.instances(NAMESPACE, f"{name}-master-0", "pytorch")
        return len(instances[-1].lines) if instances else 0

    def succeeded(self, name: str) -> bool:
        job = self.kube.call(self.kube.store.get, self.jobs, NAMESPACE, name)
        conditions = (job.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Succeeded" and c.get("status") == "True" for c in conditions)

    def wait_for(self, what: str, check: Any, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"localkube: {what} did not happen within {timeout:g}s")
            time.sleep(0.1)

    def stop(self) -> None:
        self.kube.stop_thread()


LINES_PER_JOB = 20


def start_jobs(cluster: Cluster, jobs: int, seconds: float) -> tuple[list[str], int]:
    """``jobs`` running jobs whose masters end, one after another, ``seconds`` to twice that from now;
    (their names, the log lines their triggers log in all)."""
    names = [f"start-{i:03d}" for i in range(jobs)]
    for i, name in enumerate(names):
        lines = [f"{name} {_log_line(j)}" for j in range(LINES_PER_JOB)]
        cluster.create(name, _master_script(seconds * (1 + i / max(jobs - 1, 1)), lines))
    cluster.wait_for("the masters' first lines", lambda: all(cluster.log_length(n) for n in names))
    return names, LINES_PER_JOB * jobs


def backlog_job(cluster: Cluster, lines: int, *, running: bool) -> str:
    """A job whose master wrote ``lines`` lines, and runs on (``running``) or succeeded."""
    name = f"{BACKLOG_JOB}-{'running' if running else 'finished'}"
    cluster.create(name, _master_script(None if running else 0.0, [_log_line(i) for i in range(lines)]))
    cluster.wait_for("the backlog", lambda: cluster.log_length(name) >= lines)
    if not running:
        cluster.wait_for("the job's success", lambda: cluster.succeeded(name))
    return name


def prepare(scenario: str, args: argparse.Namespace, cluster: Cluster) -> tuple[list[str], int]:
    """Create the scenario's jobs; (job names, the replica log lines the triggers must log in all)."""
    if scenario == "start":
        return start_jobs(cluster, args.jobs, 10.0)
    return [backlog_job(cluster, args.lines, running=scenario == "running")], args.lines


WARM_UP = (
    "airflow.jobs.triggerer_job_runner",
    "aiohttp",
)


def child_env(tmp: str, code: Path | None, conn_json: str = "") -> dict[str, str]:
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "PYTHONPYCACHEPREFIX": str(PYCACHE),
        "AIRFLOW_HOME": tmp,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        f"AIRFLOW_CONN_{CONN_ID.upper()}": conn_json,
    }
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")]))
    return env


def warm_up(code: Path | None) -> None:
    """Compile the bytecode the children import (a deployment has it), so no run pays for compiling."""
    with tempfile.TemporaryDirectory(prefix="loop-lag-") as tmp:
        env = child_env(tmp, code)
        subprocess.run([sys.executable, "-c", "import " + ", ".join(WARM_UP)], env=env, check=True)
        package = (code or REPO) / "airflow_provider_training"
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], env=env, check=True)


def run_child(
    names: list[str],
    lines: int,
    cluster: Cluster,
    *,
    cancel: bool = False,
    code: Path | None = None,
    timeout: float = 300.0,
    debug_slow: float | None = None,
    step_limit: float = 1.0,
) -> dict[str, Any]:
    """Run triggers for ``names`` in a fresh interpreter (``code``: another checkout's package) and return
    what it measured; ``cancel``: once ``lines`` replica lines are logged, cancel the triggers."""
    with tempfile.TemporaryDirectory(prefix="loop-lag-") as tmp:
        env = child_env(tmp, code, cluster.conn_json)
        command = [sys.executable, __file__, "child", "--log-file", str(Path(tmp) / "triggers.log")]
        command += ["--expected-lines", str(lines), "--timeout", str(timeout)]
        if cancel:
            command.append("--cancel-after-lines")
        command += ["--step-limit", str(step_limit)]
        if debug_slow is not None:
            command += ["--debug-slow", str(debug_slow)]
        done = subprocess.run([*command, *names], env=env, capture_output=True, text=True, check=False)
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not found:
        raise RuntimeError(f"the trigger process failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return dict(json.loads(found[-1].removeprefix("RESULT ")))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def describe(scenario: str, args: argparse.Namespace) -> str:
    if scenario == "start":
        return f"{args.jobs} triggers start at once"
    return f"{args.lines:,}-line backlog, pod {scenario}"


def report_row(code: str, scenario: str, args: argparse.Namespace, result: dict[str, Any]) -> str:
    lags = result["lags"]
    events = ", ".join(f"{k} {v}" for k, v in sorted(result["events"].items()))
    per_line = ""
    if scenario != "start" and result["lines_seconds"]:
        per_line = f" {result['lines_seconds'] * 1e6 / max(result['lines'] - 1, 1):.0f}"
    return (
        f"{code:<9} {describe(scenario, args):<34} {max(lags) * 1000:>8.0f} "
        f"{percentile(lags, 0.99) * 1000:>7.1f} {statistics.median(lags) * 1000:>7.2f} {len(lags):>6} "
        f"{result['longest_step'] * 1000:>8.0f} {result['lines']:>7}{per_line:>9}  {events}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="triggers that start at once (default 200)")
    parser.add_argument("--lines", type=int, default=100_000, help="backlog lines (default 100000)")
    parser.add_argument("--baseline", default=BASELINE_REF, help="git ref of the code to compare with")
    parser.add_argument(
        "--scenario", action="append", choices=("start", "running", "finished"), help="default: all three"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="per child run (s)")
    parser.add_argument("--debug-slow", type=float, help="asyncio debug mode; report steps over this (s)")
    args = parser.parse_args()
    scenarios = args.scenario or ["start", "running", "finished"]
    logging.basicConfig(level=logging.WARNING)
    header = (
        f"{'code':<9} {'scenario':<34} {'max ms':>8} {'p99 ms':>7} {'med ms':>7} {'n':>6} {'step ms':>8} "
        f"{'lines':>7} "
        f"{'us/line':>8}  events"
    )
    rows = [header, "-" * len(header)]
    codes: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline:
        from baseline import baseline_tree  # benchmarks/ (the script's folder); tests load this file alone

        codes.insert(0, (args.baseline, baseline_tree(args.baseline)))
    for scenario in scenarios:
        for code, path in codes:  # a fresh cluster each time: no other run's objects in its lists
            with tempfile.TemporaryDirectory(prefix="loop-lag-") as tmp:
                cluster = Cluster(Path(tmp))
                try:
                    names, lines = prepare(scenario, args, cluster)
                    result = run_child(
                        names,
                        lines,
                        cluster,
                        cancel=scenario == "running",
                        code=path,
                        timeout=args.timeout,
                        debug_slow=args.debug_slow,
                    )
                finally:
                    cluster.stop()
            rows.append(report_row(code, scenario, args, result))
            print(rows[-1], flush=True)
            print(f"    worst lags (s after the first trigger, lag s): {result['worst']}", flush=True)
            for step in result.get("longest_steps", []):
                print(f"    longest step: {step}", flush=True)
            if "longest_gc" in result:
                spent, generation = result["longest_gc"]
                print(
                    f"    longest garbage collection: {spent * 1000:.0f} ms (generation {generation}); "
                    f"{result['full_gcs']} full collections",
                    flush=True,
                )
            for step in result["steps_over_limit"] + result["slow_steps"]:
                print(f"    slow step: {step}", flush=True)
    print()
    print("\n".join(rows))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_parser = argparse.ArgumentParser()
        child_parser.add_argument("child")
        child_parser.add_argument("--log-file", required=True)
        child_parser.add_argument("--expected-lines", type=int, required=True)
        child_parser.add_argument("--timeout", type=float, required=True)
        child_parser.add_argument("--cancel-after-lines", action="store_true")
        child_parser.add_argument("--debug-slow", type=float)
        child_parser.add_argument("--step-limit", type=float, default=1.0, help="report steps over (s CPU)")
        child_parser.add_argument("--profile", help="write the loop thread's cProfile stats here")
        child_parser.add_argument("names", nargs="+")
        child(child_parser.parse_args())
    else:
        main()
