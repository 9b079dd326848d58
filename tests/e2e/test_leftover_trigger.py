"""``airflow dags test`` then ``airflow triggerer`` on the same metadata DB (issue 27, point 1).

``dags test`` runs a deferred task's trigger inline and resumes the task, but leaves the trigger row behind,
still linked to the task instance. The next triggerer starts that trigger for a task instance that is no
longer deferred: the task finished on its own, no user ended it, so its job (finished, kept by
``on_finish_action="keep"``) stays, and the trigger's log says who decided that.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator

import pytest
from localkube.cluster import LocalKube
from localkube.pytest_plugin import connection_json

from tests.e2e.conftest import DAG_FILES, START_TIMEOUT, Airflow, _stop, migrated
from tests.e2e.test_airflow_components import pytorch_job

pytestmark = pytest.mark.timeout(600)

DAG_ID = "e2e_train"  # deferrable, on_finish_action="keep" (the default), job e2e-train
JOB = "e2e-train"


@pytest.fixture
def home(kube: LocalKube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    """A fresh AIRFLOW_HOME on a migrated DB, ``kubernetes_default`` pointing at localkube; no component runs
    until the test starts one."""
    assert kube.kubeconfig is not None
    airflow = migrated(connection_json(kube.kubeconfig), tmp_path_factory, DAG_FILES)
    try:
        yield airflow
    finally:
        _stop(airflow.processes)


def triggers(airflow: Airflow) -> int:
    with contextlib.closing(sqlite3.connect(airflow.home / "airflow.db", timeout=30)) as db:
        return int(db.execute("SELECT count(*) FROM trigger").fetchone()[0])


def test_a_trigger_left_by_dags_test_keeps_the_finished_job(home: Airflow, kube: LocalKube) -> None:
    dags_test = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", DAG_ID],
        env=home.env,
        cwd=home.home,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
    )
    assert dags_test.returncode == 0, dags_test.stdout[-3000:] + dags_test.stderr[-3000:]
    job = pytorch_job(kube, JOB)
    assert job is not None
    assert triggers(home) == 1, "dags test no longer leaves its trigger behind: nothing to test"

    home.start("triggerer")

    # The triggerer starts the leftover trigger, which ends (on its own, or cancelled and then on_kill).
    def trigger_log() -> str:
        files = (home.home / "logs" / f"dag_id={DAG_ID}").glob("run_id=*/task_id=train/*.log.trigger.*.log")
        return "".join(f.read_text() for f in files)

    said = "Deleting nothing: PyTorchJob default/e2e-train already ended (Succeeded)"
    home.wait(
        "the leftover trigger to end",
        lambda: triggers(home) == 0 and ("trigger completed" in trigger_log() or said in trigger_log()),
        START_TIMEOUT,
    )

    now = pytorch_job(kube, JOB)
    assert now is not None, f"the finished job was deleted:\n{trigger_log()}"
    assert now["metadata"]["uid"] == job["metadata"]["uid"]
    assert "deletionTimestamp" not in now["metadata"]
    home.wait("the trigger to say why it deleted nothing", lambda: said in trigger_log(), 60)
    assert "no user ended a running try" in trigger_log()
