"""``dag.test()`` of a DAG with PyTorchJobOperator and a sensor: the real Task SDK, XCom, task_state_store
and inline triggers, against localkube."""

from __future__ import annotations

import importlib.util

import pytest

from tests.dags.conftest import DAG_FILES
from tests.operators.harness import KIND_BY_NAME, job_or_none

pytestmark = pytest.mark.timeout(180)


def load_dag(name: str):
    spec = importlib.util.spec_from_file_location(name, DAG_FILES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_dag_test_runs_operator_and_sensor(airflow_db, cluster, capfd, caplog):
    dag = load_dag("train_and_check")

    run = dag.test()

    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {
        "train": "success",
        "check": "success",
        "check_poke": "success",
        "train_sync": "success",
    }
    assert run.state == "success"
    captured = capfd.readouterr()
    out = captured.out + captured.err + caplog.text  # where the task runner's logs go depends on set-up order
    assert "[DAG TEST] running trigger in line" in out
    assert "[master-0] epoch 1 loss 0.41" in out  # replica logs streamed by the trigger
    job = job_or_none(cluster, KIND_BY_NAME["PyTorchJob"], f"train-and-check-{run.logical_date:%Y%m%d}")
    assert any(c["type"] == "Succeeded" and c["status"] == "True" for c in job["status"]["conditions"])
    results = return_values(run.run_id, ["train", "check", "check_poke"])
    assert results["check"]["name"] == results["train"]["name"] == job["metadata"]["name"]
    assert results["check"]["state"] == "Succeeded"
    assert results["check_poke"] == results["check"]  # poke and deferrable mode push the same XCom


def return_values(run_id: str, task_ids: list[str]) -> dict[str, object]:
    """The ``return_value`` XCom of each task, as the task runner stored it."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.execute(XComModel.get_many(run_id=run_id, key="return_value", task_ids=task_ids))
        return {row.task_id: XComModel.deserialize_value(row) for (row,) in rows}
