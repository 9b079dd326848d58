"""`make demo`: run the retraining pipeline DAG against a local cluster, with no Kubernetes and no GPU.

1. A local AIRFLOW_HOME under ``.demo/airflow`` (SQLite, no example DAGs, dags_folder = ``example_dags``),
   migrated quietly.
2. A new data snapshot in ``.demo/retraining/incoming`` (what the pipeline's sensor waits for).
3. localkube with the process runtime in the background: every replica of the PyTorchJob is a local process
   running ``example_dags/training/ddp_sgd.py``; ``kubernetes_default`` points at it.
4. ``airflow dags test retraining_pipeline``, streamed to the terminal and kept in ``.demo/dags-test.log``.
   ``dags test`` prints the task logs instead of writing files; the demo files each task's part of the
   output in Airflow's layout, ``.demo/airflow/logs/dag_id=.../run_id=.../task_id=.../attempt=1.log``.
5. A short result; localkube is stopped also on failure or Ctrl-C. The exit code is the DAG run's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / ".demo"
AIRFLOW_HOME = DEMO / "airflow"
RETRAINING_ROOT = DEMO / "retraining"
KUBECONFIG = DEMO / "kubeconfig"
LOCALKUBE_LOG = DEMO / "localkube.log"
DAGS_TEST_LOG = DEMO / "dags-test.log"
DAG_ID = "retraining_pipeline"
NAMESPACE = "default"
TRAIN_SCRIPT = REPO / "example_dags" / "training" / "ddp_sgd.py"
LOCALKUBE = (sys.executable, "-m", "localkube")
READY_TIMEOUT = 60.0
TASK_START = re.compile(r"\[DAG TEST\] starting task_id=(?P<task>\S+)")
TASK_END = re.compile(r"\[DAG TEST\] end task task_id=(?P<task>\S+)")
EPOCH_LOSS = re.compile(r"\[(?P<replica>[\w-]+)\] epoch (?P<epoch>\d+) loss (?P<loss>[\d.]+)")


def airflow_env() -> dict[str, str]:
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "example_dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
        "RETRAINING_ROOT": str(RETRAINING_ROOT),
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {
                "conn_type": "kubernetes",
                "extra": {"kube_config_path": str(KUBECONFIG), "namespace": "default"},
            }
        ),
    }
    env.pop("KUBECONFIG", None)  # the connection names its kubeconfig; never a user's cluster
    return env


def step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def migrate(env: dict[str, str]) -> None:
    AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True
    )
    if done.returncode:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"airflow db migrate failed (exit {done.returncode})")


def new_snapshot() -> Path:
    """A fresh snapshot, drawn from a different distribution each time (the data drifts)."""
    now = datetime.now(UTC)
    path = RETRAINING_ROOT / "incoming" / f"{now:%Y%m%dT%H%M%S}.npz"
    subprocess.run(
        [sys.executable, str(TRAIN_SCRIPT), "--make-data", str(path), "--seed", str(int(now.timestamp()))],
        check=True,
    )
    return path


@contextmanager
def localkube() -> Iterator[subprocess.Popen]:
    """localkube serving with the process runtime until the block ends (also on error or Ctrl-C)."""
    KUBECONFIG.unlink(missing_ok=True)
    with LOCALKUBE_LOG.open("w") as log:
        server = subprocess.Popen(
            [*LOCALKUBE, "serve", "--port", "0", "--kubeconfig", str(KUBECONFIG), "--runtime", "process"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches only us; the finally below stops it
        )
    try:
        ready = wait_ready(server)
        print(ready, flush=True)
        yield server
    finally:
        stop(server)


def wait_ready(server: subprocess.Popen) -> str:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        for line in LOCALKUBE_LOG.read_text().splitlines():
            if line.startswith("localkube serving"):
                return line
        if server.poll() is not None:
            raise SystemExit(f"localkube exited with {server.returncode}; see {LOCALKUBE_LOG}")
        time.sleep(0.1)
    raise SystemExit(f"localkube not ready within {READY_TIMEOUT:.0f}s; see {LOCALKUBE_LOG}")


def stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    print(f"localkube stopped (log: {rel(LOCALKUBE_LOG)})", flush=True)


def dags_test(env: dict[str, str]) -> tuple[int, str]:
    """Run the DAG; stream its output and keep it. Returns (exit code, output)."""
    lines: list[str] = []
    with DAGS_TEST_LOG.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "airflow", "dags", "test", DAG_ID],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        assert process.stdout is not None
        try:
            for line in process.stdout:
                sys.stdout.write(line)
                log.write(line)
                lines.append(line)
        except BaseException:  # Ctrl-C (which reaches it as well) or SIGTERM: stop it before localkube
            process.terminate()
            raise
        finally:
            code = process.wait()
    return code, "".join(lines)


def latest_run() -> dict:
    """The newest run of the DAG: its state, and the train task's XCom result."""
    with sqlite3.connect(AIRFLOW_HOME / "airflow.db") as db:
        row = db.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (DAG_ID,)
        ).fetchone()
        if row is None:
            return {}
        run_id, state = row
        states = dict(
            db.execute(
                "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", (DAG_ID, run_id)
            ).fetchall()
        )
        value = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = 'return_value'",
            (DAG_ID, run_id, "train"),
        ).fetchone()
    return {"run_id": run_id, "state": state, "tasks": states, "train": decode(value[0]) if value else None}


def decode(value: bytes | str) -> dict:
    data = json.loads(value)
    return json.loads(data) if isinstance(data, str) else data


def loss_curves(output: str) -> dict[str, list[tuple[int, float]]]:
    """Per replica (its log prefix): the (epoch, loss) points its training logged, in order."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for match in EPOCH_LOSS.finditer(output):
        curves.setdefault(match["replica"], []).append((int(match["epoch"]), float(match["loss"])))
    return curves


def split_task_logs(output: str, run_id: str) -> list[Path]:
    """Each task's lines of the ``dags test`` output, written where Airflow keeps task logs."""
    written: list[Path] = []
    task: str | None = None
    lines: list[str] = []
    for line in output.splitlines(keepends=True):
        if task is None and (start := TASK_START.search(line)):
            task, lines = start["task"], []
        if task is not None:
            lines.append(line)
            if (end := TASK_END.search(line)) and end["task"] == task:
                path = AIRFLOW_HOME / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / f"task_id={task}"
                path.mkdir(parents=True, exist_ok=True)
                (path / "attempt=1.log").write_text("".join(lines))
                written.append(path / "attempt=1.log")
                task = None
    return written


def rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def report(code: int, output: str) -> None:
    run = latest_run()
    step("Result")
    print(f"DAG run {run.get('run_id')}: {run.get('state')}  (airflow dags test exit code {code})")
    for task_id, state in sorted((run.get("tasks") or {}).items()):
        print(f"  {task_id:<18} {state}")
    train = run.get("train") or {}
    if train:
        replicas = ", ".join(f"{n['desired']} {t}" for t, n in (train.get("replicas") or {}).items())
        print(
            f"{train.get('kind')} {train.get('namespace')}/{train.get('name')}: {train.get('state')} "
            f"in {train.get('duration_seconds')}s ({replicas})"
        )
    for replica, points in sorted(loss_curves(output).items()):
        (first, start), (last, end) = points[0], points[-1]
        print(f"  [{replica}] loss {start:.4f} (epoch {first}) -> {end:.4f} (epoch {last})")
    history = RETRAINING_ROOT / "registry" / "history.jsonl"
    if run.get("tasks", {}).get("promote") == "success" and history.exists():
        last = json.loads(history.read_text().splitlines()[-1])
        production = rel(RETRAINING_ROOT / "registry" / "production")
        print(
            f"Promoted to {production} (val_loss {last['val_loss']:.4f}, accuracy {last['val_accuracy']:.3f})"
        )
    elif run.get("tasks", {}).get("keep_production") == "success":
        print("Not promoted: the production model is as good or better on the new data")
    logs = split_task_logs(output, run["run_id"]) if run else []
    print("Task logs:" if logs else f"Task logs: none found in {rel(DAGS_TEST_LOG)}")
    for path in logs:
        print(f"  {rel(path)}")
    print(f"Captured output: {rel(DAGS_TEST_LOG)}")


def main() -> int:
    started = time.monotonic()
    env = airflow_env()
    step(f"Airflow home {rel(AIRFLOW_HOME)} (SQLite): migrating the database")
    migrate(env)
    step("A new data snapshot arrives")
    new_snapshot()
    step("Starting localkube with the process runtime")
    with localkube():
        step(f"airflow dags test {DAG_ID}")
        code, output = dags_test(env)
        report(code, output)
    ok = code == 0 and latest_run().get("state") == "success"
    print(f"\nDemo {'succeeded' if ok else 'FAILED'} in {time.monotonic() - started:.0f}s", flush=True)
    return 0 if ok else 1


def interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM too: unwind, so localkube and the DAG run are stopped


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, interrupted)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nInterrupted", file=sys.stderr)
        sys.exit(130)
