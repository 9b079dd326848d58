"""Jobs that finish seconds after their task deferred, in a real deployment (api-server, scheduler with
LocalExecutor, dag-processor, triggerer subprocesses) against localkube: JOBS mapped deferrable
PyTorchJobOperator tasks whose jobs run 1, 2 or 3 s. A success ends each task in the triggerer
(``TaskSuccessEvent`` with the result XCom), so the scheduler's race between the deferring worker's exit and a
resumed try (apache/airflow#72716) has no resumed try to fail: all JOBS tasks succeed with their result."""

from __future__ import annotations

import signal
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localkube.cluster import LocalKube

from tests.e2e.conftest import Airflow

pytestmark = pytest.mark.timeout(1800)  # a busy machine: the test also starts the deployment

DAG_ID = "e2e_fast_finish"
JOBS = 20  # e2e_fast_finish.JOBS


@pytest.fixture(scope="module")
def parallel(airflow: Airflow) -> Iterator[Airflow]:
    """The deployment with a scheduler that runs 4 tasks at a time (the race needs overlapping tries)."""
    airflow.env["AIRFLOW__CORE__PARALLELISM"] = "4"
    airflow.stop("scheduler", signal.SIGTERM)
    airflow.start("scheduler")
    yield airflow


def answer(airflow: Airflow, path: str) -> Any:
    """GET ``path``; ``None`` while the busy API server does not answer within its timeout."""
    try:
        return airflow.request("GET", path)
    except (urllib.error.URLError, TimeoutError):
        return None


def mapped(airflow: Airflow, run_id: str) -> list[dict]:
    found = answer(airflow, f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/train/listMapped?limit=100")
    return list(found["task_instances"]) if found else []


def test_jobs_that_finish_seconds_after_deferring_end_as_successful_tasks(
    parallel: Airflow, kube: LocalKube
) -> None:
    parallel.trigger(DAG_ID, "run1")

    def all_done() -> list[dict] | None:
        tis = mapped(parallel, "run1")
        done = [ti for ti in tis if ti["state"] in ("success", "failed", "upstream_failed", "skipped")]
        return tis if len(tis) == JOBS and len(done) == JOBS else None

    tis = parallel.wait(f"the {JOBS} tasks to end", all_done, timeout=1500)

    states = {ti["map_index"]: ti["state"] for ti in tis}
    failed = sorted(i for i, state in states.items() if state != "success")
    assert not failed, f"failed tasks {failed}\n{parallel.output('scheduler')[-4000:]}"
    for ti in tis:
        assert ti["try_number"] == 1, ti  # no retry hid a failure
        path = f"/dags/{DAG_ID}/dagRuns/run1/taskInstances/train/xcomEntries/return_value"
        url = f"{path}?map_index={ti['map_index']}"
        xcom = parallel.wait("the result XCom", lambda url=url: answer(parallel, url), 60)
        assert xcom["value"]["state"] == "Succeeded", xcom
        assert xcom["value"]["kind"] == "PyTorchJob"
    scheduler = parallel.output("scheduler")
    assert "but the task instance's state attribute is" not in scheduler
    # Each task deferred and was ended by its trigger (a TaskSuccessEvent's repr): no worker resumed it.
    for ti in tis:
        log = parallel.task_dir(DAG_ID, "run1", "train") / f"map_index={ti['map_index']}"

        def trigger_log(log: Path = log) -> str:
            return "".join(p.read_text() for p in log.glob("attempt=1.log.trigger.*.log"))

        # The triggerer logs the event as it gets it; the records may still be on their way to the file.
        parallel.wait(
            f"trigger {ti['map_index']}'s event", lambda: "Trigger fired event" in trigger_log(), 300
        )
        assert "is Succeeded" in trigger_log(), ti
        assert "TriggerEvent<'success'>" in trigger_log(), trigger_log()[-2000:]
