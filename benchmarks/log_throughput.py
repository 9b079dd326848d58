"""Log throughput through one follow, on the real kube-apiserver: ``kubectl logs -f`` beside the provider's
follow into a task log, of this tree and of the baseline tree, side by side in one run.

One PyTorchJob of one Master replica, run by ``localkube agent``'s process runtime as the kubelet: its
container writes ``--lines`` lines of about 100 bytes as fast as it can, then a marker line, and keeps
running, so every reader is a follow (``follow=true``). Each reader starts once the whole log is written (the
same backlog for each) and is timed from its start until the marker line comes out of it:

- ``kubectl logs -f``: kubectl built from the same Kubernetes module as the real tier
  (scripts/realkube/build.sh builds it into the same folder), its output read and dropped; and again with
  ``--timestamps``, the request the provider makes (each line with its kubelet time, the cursor's key);
- the provider: a ``ReplicaLogStreamer`` (what the trigger runs) following the Master replica with
  timestamps, its records written by ``logging`` to a file as the trigger's task log gets them (prefixed
  lines, the kubelet's timestamp), the modules a trigger imports before it runs imported first (a running
  triggerer has them);
- the same on the baseline tree (``--baseline``, default the commit before issue 28, checked out once into
  ``~/.cache/airflow-provider-training/baseline-<commit>``);
- both again with each line only counted, not logged: the follow's own share (stream, parse, cursor).

Each provider measurement runs in a fresh process of its own, with that tree first on ``sys.path``. The
readers take turns, ``--runs`` rounds; each row shows the best run (lines/s and MB/s of it) and the median and
worst beside it (the machine's noise); MB/s counts the container's bytes (lines and newlines).

    REALKUBE_BIN=$(scripts/realkube/build.sh) .venv/bin/python benchmarks/log_throughput.py
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from baseline import baseline_tree

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "53df9b2"
CRD = ROOT / "tests" / "fixtures" / "crds" / "kubeflow.org-v1" / "pytorchjobs.yaml"
MARKER = "log-throughput-end"
JOB, NAMESPACE = "throughput", "default"
LINE_BYTES = 100  # each line as the container writes it, its newline included
# The container: the lines, the marker, then it keeps running until the job is deleted.
WRITER = f"""
import sys, time
out = sys.stdout
for i in range(int(sys.argv[1])):
    out.write(f"line {{i:09d}} " + "x" * {LINE_BYTES - 16} + "\\n")
out.write("{MARKER}\\n")
out.flush()
time.sleep(86400)
"""


def job_manifest(lines: int) -> dict:
    container = {
        "name": "pytorch",
        "image": "python",
        "command": ["python", "-c", WRITER, str(lines)],
    }
    master = {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": JOB, "namespace": NAMESPACE},
        "spec": {"pytorchReplicaSpecs": {"Master": master}},
    }


# -- the provider's follow, in a process of its own (the tree first on sys.path) ---------------------------


async def provider_follow(task_log: Path | None) -> tuple[float, int]:
    """Follow the job's Master as the trigger does, into ``task_log`` (``None``: lines only counted, the
    follow's own share); (seconds to the marker, lines)."""
    from airflow_provider_training.hooks.training import AsyncTrainingJobHook
    from airflow_provider_training.kinds.registry import get_kind
    from airflow_provider_training.logs import ReplicaLogStreamer
    from airflow_provider_training.triggers.training import RUNTIME_MODULES

    for module in RUNTIME_MODULES:  # what the trigger imports before it runs (the HTTP client among them)
        importlib.import_module(module)

    logger = logging.getLogger("airflow.task")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(task_log or os.devnull)
    handler.setFormatter(
        logging.Formatter("[%(asctime)s] {%(filename)s:%(lineno)d} %(levelname)s - %(message)s")
    )
    logger.addHandler(handler)
    got = asyncio.Event()
    count = 0

    def emit(record: str, timestamp: str | None = None) -> None:  # one line, or the lines of one read
        nonlocal count
        count += record.count("\n") + 1
        if task_log is not None:
            logger.info(record, extra={"timestamp": timestamp})
        if record.endswith(MARKER):
            got.set()

    hook = AsyncTrainingJobHook()
    streamer = ReplicaLogStreamer(
        hook,
        get_kind("PyTorchJob"),
        NAMESPACE,
        JOB,
        replicas="master",
        emit=emit,
        note=lambda _: None,
        pod_times=True,  # as the trigger has it: each record carries the line's kubelet time
    )
    start = time.perf_counter()
    run = asyncio.get_running_loop().create_task(streamer.run())
    await got.wait()
    seconds = time.perf_counter() - start
    await streamer.stop()
    await run
    handler.close()
    return seconds, count


def measure_provider(tree: Path, kubeconfig: Path, task_log: Path | None) -> tuple[float, int]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'localkube' / 'src'}",
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {
                "conn_type": "kubernetes",
                "extra": {"kube_config_path": str(kubeconfig), "namespace": NAMESPACE},
            }
        ),
    }
    if task_log is not None:
        task_log.unlink(missing_ok=True)
    child = [sys.executable, str(Path(__file__).resolve()), "--child", str(task_log or "-")]
    out = subprocess.run(child, env=env, cwd=tree, check=True, capture_output=True, text=True).stdout
    seconds, count = json.loads(out.splitlines()[-1])
    return float(seconds), int(count)


# -- kubectl -------------------------------------------------------------------------------------------------


def measure_kubectl(kubectl: Path, kubeconfig: Path, pod: str, *options: str) -> tuple[float, int]:
    """``kubectl logs -f`` of the pod; its output read in large pieces and dropped (as into /dev/null) until
    the marker line; (seconds, lines)."""
    args = [str(kubectl), "--kubeconfig", str(kubeconfig), "-n", NAMESPACE, "logs", "-f", *options, pod]
    start = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.PIPE)
    assert process.stdout is not None
    fd, lines, last = process.stdout.fileno(), 0, b""
    try:
        while True:
            piece = os.read(fd, 1 << 20)
            if not piece:
                raise SystemExit(f"kubectl logs -f ended before the marker line (exit {process.wait()})")
            lines += piece.count(b"\n")
            last = (last + piece)[-64:]
            if MARKER.encode() + b"\n" in last:
                return time.perf_counter() - start, lines
    finally:
        process.kill()
        process.wait()


# -- the run -------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5, help="runs of each reader (best, median, worst)")
    parser.add_argument("--baseline", default=BASELINE, help="the commit to compare with")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one provider measurement: the task log or -
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(asyncio.run(provider_follow(None if args.child == "-" else Path(args.child)))))
        return

    from localkube.realcluster import RealCluster

    build = [str(ROOT / "scripts" / "realkube" / "build.sh")]
    bin_dir = Path(os.environ.get("REALKUBE_BIN") or subprocess.check_output(build, text=True).split()[-1])
    kubectl = bin_dir / "kubectl"
    if not kubectl.exists():
        raise SystemExit(f"no kubectl in {bin_dir}: run scripts/realkube/build.sh (it builds kubectl too)")
    trees = {"this tree": ROOT, f"baseline {args.baseline}": baseline_tree(args.baseline)}
    workdir = Path(tempfile.mkdtemp(prefix="log-throughput-"))
    (workdir / "crds" / CRD.parent.name).mkdir(parents=True)
    shutil.copy(CRD, workdir / "crds" / CRD.parent.name / CRD.name)
    cluster = RealCluster(
        bin_dir=bin_dir,
        directory=workdir / "realkube",
        crd_dir=workdir / "crds",
        agent_args=("--runtime", "process", "--controllers", "kubeflow"),
    )
    cluster.start()
    try:
        cluster.apply(job_manifest(args.lines))
        pod = f"{JOB}-master-0"
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}/log?tailLines=1"

        def written() -> bool:
            try:
                return cluster.request("GET", path).strip() == MARKER.encode()
            except Exception:  # not created, not started yet
                return False

        cluster.wait_for(written, 600)
        readers: dict[str, Callable[[], tuple[float, int]]] = {
            "kubectl logs -f": partial(measure_kubectl, kubectl, cluster.kubeconfig, pod),
            # What the provider asks for: each line with its kubelet timestamp (the cursor's key).
            "kubectl logs -f --timestamps": partial(
                measure_kubectl, kubectl, cluster.kubeconfig, pod, "--timestamps"
            ),
        }
        for name, tree in trees.items():
            readers[f"provider, {name}: task log"] = partial(
                measure_provider, tree, cluster.kubeconfig, workdir / "task.log"
            )
        for name, tree in trees.items():
            readers[f"provider, {name}: counted only"] = partial(
                measure_provider, tree, cluster.kubeconfig, None
            )
        results: dict[str, list[tuple[float, int]]] = {name: [] for name in readers}
        for _ in range(args.runs):  # interleaved, so a slower moment of the machine hits every reader alike
            for name, reader in readers.items():
                results[name].append(reader())
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    expected = args.lines + 1
    megabytes = (args.lines * LINE_BYTES + len(MARKER) + 1) / 1e6
    print(
        f"\nLog throughput of one follow, {args.lines:,} lines of {LINE_BYTES} bytes ({megabytes:.1f} MB), "
        f"kube-apiserver {cluster.version} over TLS, {args.runs} runs each:\n"
    )
    print(f"  {'reader':<40} {'best s':>7} {'lines/s':>10} {'MB/s':>6} {'median':>7} {'worst':>6}")
    for name, runs in results.items():
        if (count := min(count for _, count in runs)) < expected:
            raise SystemExit(f"{name} gave {count} lines, {expected} written")
        times = [seconds for seconds, _ in runs]
        best = min(times)
        print(
            f"  {name:<40} {best:7.2f} {expected / best:10,.0f} {megabytes / best:6.1f} "
            f"{statistics.median(times):7.2f} {max(times):6.2f}"
        )


if __name__ == "__main__":
    main()
