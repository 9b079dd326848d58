"""Every example DAG, triggered without a logical date in a real deployment, as a user does it: through the
REST API with ``"logical_date": null`` (what the UI's Trigger button sends) and with ``airflow dags trigger``.
Airflow 3 gives such a run no logical date, so a template using ``ds``, ``ds_nodash``, ``ts`` and friends
fails there; the examples use ``run_id`` and ``dag_run.run_after`` instead.

The jobs run on localkube's scripted runtime (every replica succeeds after a short timeline). The two PyTorch
examples train for real only on the process runtime (tests/examples/test_pytorch_dags.py); here their
training tasks must succeed (templates rendered, job created and finished), while their downstream tasks that
read the training's output files are not asserted on.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localkube.cluster import LocalKube
from localkube.runtime.script import DEFAULT_STEP

from tests.e2e.conftest import Airflow, deploy

pytestmark = pytest.mark.timeout(1200)  # a busy machine: each CLI call alone can take a minute

EXAMPLE_DAGS = Path(__file__).resolve().parents[2] / "example_dags"
# dag id -> the tasks that must succeed (None: the whole run must succeed).
EXAMPLES: dict[str, tuple[str, ...] | None] = {
    "edl_training_job": None,
    "mpi_job": None,
    "t9k_job": None,
    "tfjob_ps_workers": None,
    "xgboost_job": None,
    "hyperparameter_sweep": ("trial",),
    "retraining_pipeline": ("wait_for_new_data", "train"),
}
DONE = ("success", "failed", "upstream_failed", "skipped")
REPLICA_SECONDS = 15.0


@pytest.fixture(scope="module")
def examples(kube: LocalKube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    """A deployment whose DAGs folder is a copy of example_dags, whose replicas run REPLICA_SECONDS.

    Not the scripted runtime's default 0.2 s: Airflow 3.3's scheduler fails a resumed task when the trigger
    has already moved it to queued before the executor's event for the deferring try is processed
    ("finished with state success, but the task instance's state attribute is queued"; it excuses only
    scheduled). Replicas that run some seconds (e2e_train's run 3) let that event be processed first; on a
    busy machine the scheduler's loop takes longer than 3 s.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(DEFAULT_STEP, "duration", REPLICA_SECONDS)
        with deploy(kube, tmp_path_factory, EXAMPLE_DAGS, start_timeout=240) as deployment:
            yield deployment


def run_conf(dag_id: str, tmp: Path) -> dict[str, Any]:
    """Where the PyTorch examples read and write (a snapshot waiting in ``incoming/`` for the retraining)."""
    if dag_id == "hyperparameter_sweep":
        return {"out": str(tmp / "sweeps"), "epochs": 1}
    if dag_id == "retraining_pipeline":
        (tmp / "retraining" / "incoming").mkdir(parents=True, exist_ok=True)
        (tmp / "retraining" / "incoming" / "snapshot-1.npz").write_bytes(b"")
        return {"root": str(tmp / "retraining"), "epochs": 1}
    return {}


def cli_trigger(airflow: Airflow, dag_id: str, run_id: str, conf: dict[str, Any]) -> None:
    """``airflow dags trigger``: it writes to the (SQLite) DB itself, so one at a time."""
    command = [sys.executable, "-m", "airflow", "dags", "trigger", dag_id, "--run-id", run_id]
    command += ["--conf", json.dumps(conf)]
    done = subprocess.run(
        command, env=airflow.env, cwd=airflow.home, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"


def post_run(airflow: Airflow, dag_id: str, body: dict[str, Any], tries: int = 5) -> None:
    """POST the run. A busy API server may answer after the client gave up, having created it: a retry then
    fails (409, or 500 from the unique constraint), so each failed try first looks whether the run exists."""
    path = f"/dags/{dag_id}/dagRuns"
    error: Exception | None = None
    for _ in range(tries):
        with contextlib.suppress(urllib.error.URLError, TimeoutError):
            if airflow.request("GET", f"{path}/{body['dag_run_id']}") and error is not None:
                return  # created by the try that timed out
        try:
            airflow.request("POST", path, body)
            return
        except (urllib.error.URLError, TimeoutError) as err:  # HTTPError included
            error = err
    detail = error.read()[-2000:] if isinstance(error, urllib.error.HTTPError) else b""
    pytest.fail(f"POST {path}: {error} {detail!r}\n{airflow.diagnostics()}")


def get(airflow: Airflow, path: str, tries: int = 5) -> Any:
    """GET, asking again when a busy API server does not answer within the client's timeout."""
    for _ in range(tries - 1):
        with contextlib.suppress(TimeoutError):
            return airflow.request("GET", path)
    return airflow.request("GET", path)


def states(airflow: Airflow, dag_id: str, run_id: str) -> dict[str, list[str]]:
    """Each task's states (one per map index)."""
    found: dict[str, list[str]] = {}
    listed = get(airflow, f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
    for ti in listed["task_instances"]:
        found.setdefault(ti["task_id"], []).append(str(ti["state"]))
    return found


def finished(airflow: Airflow, dag_id: str, run_id: str) -> bool:
    try:
        return _finished(airflow, dag_id, run_id)
    except (TimeoutError, urllib.error.URLError):
        return False  # a busy API server: ask again


def _finished(airflow: Airflow, dag_id: str, run_id: str) -> bool:
    wanted = EXAMPLES[dag_id]
    if wanted is None:
        return get(airflow, f"/dags/{dag_id}/dagRuns/{run_id}")["state"] in ("success", "failed")
    tasks = states(airflow, dag_id, run_id)
    return all(task in tasks and all(s in DONE for s in tasks[task]) for task in wanted)


def test_every_example_runs_when_triggered_without_a_logical_date(examples: Airflow, tmp_path: Path) -> None:
    runs: list[tuple[str, str]] = []
    for dag_id in EXAMPLES:  # what the UI's Trigger button sends
        body = {"dag_run_id": f"rest-{dag_id}", "logical_date": None, "conf": run_conf(dag_id, tmp_path)}
        post_run(examples, dag_id, body)
        runs.append((dag_id, f"rest-{dag_id}"))
    for dag_id in EXAMPLES:
        cli_trigger(examples, dag_id, f"cli-{dag_id}", run_conf(dag_id, tmp_path))
        runs.append((dag_id, f"cli-{dag_id}"))

    problems: dict[str, Any] = {}
    for dag_id, run_id in runs:
        run = get(examples, f"/dags/{dag_id}/dagRuns/{run_id}")
        assert run["logical_date"] is None, run  # what the UI, the REST API and the CLI create
        examples.wait(f"{dag_id} {run_id}", lambda d=dag_id, r=run_id: finished(examples, d, r), timeout=240)
        tasks = states(examples, dag_id, run_id)
        wanted = EXAMPLES[dag_id] or tuple(tasks)
        if any(set(tasks[task]) != {"success"} for task in wanted):
            problems[f"{dag_id} {run_id}"] = tasks
    assert problems == {}
    sweep = states(examples, "hyperparameter_sweep", "rest-hyperparameter_sweep")["trial"]
    assert len(sweep) == 3  # one trial job per learning rate, each created and finished
