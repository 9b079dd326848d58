"""Every example DAG whose framework is not installed runs under ``dag.test()`` against localkube's scripted
runtime: the job's replicas follow a timeline instead of running TensorFlow, XGBoost, MPI or Paddle."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from localkube.resources import BATCH_JOBS, REPLICASETS
from localkube.runtime import register_script, unregister_script

from airflow_provider_training.kinds import get_kind
from airflow_provider_training.naming import TaskIdentity, default_job_name
from tests.examples.conftest import load_dag, with_script

pytestmark = pytest.mark.timeout(240)


def run_and_capture(dag, capfd, caplog, **test_kwargs) -> tuple[object, str]:
    run = dag.test(**test_kwargs)
    captured = capfd.readouterr()
    return run, captured.out + captured.err + caplog.text


def test_tfjob_ps_workers(examples_db, scripted_cluster, capfd, caplog):
    dag = load_dag("tfjob_ps_workers")
    with_script(
        dag,
        "train",
        {
            "default": {"duration": 0.3, "logs": ["{type}-{index}: step 9 loss 0.42", "{type}-{index}: ok"]},
            "PS": {"duration": None, "logs": ["ps-{index}: serving variables"]},  # until the job ends
        },
    )

    run, out = run_and_capture(dag, capfd, caplog)

    assert run.state == "success"
    assert "[chief-0] chief-0: step 9 loss 0.42" in out
    assert "[worker-2] worker-2: ok" in out
    assert "[ps-0]" not in out  # only the chief's and the workers' logs were asked for


def test_xgboost_job_from_yaml_manifest(examples_db, scripted_cluster, capfd, caplog):
    dag = load_dag("xgboost_job")
    with_script(dag, "train", {"default": {"duration": 0.3, "logs": ["{type}-{index}: [9] merror:0.02"]}})

    run, out = run_and_capture(dag, capfd, caplog)

    assert run.state == "success"
    for replica in ("master-0", "worker-0", "worker-1"):
        assert f"[{replica}] {replica}: [9] merror:0.02" in out


def test_mpi_job(examples_db, scripted_cluster, capfd, caplog):
    dag = load_dag("mpi_job")
    with_script(
        dag,
        "train",
        {
            "Launcher": {"duration": 0.3, "logs": ["Epoch 1 loss 0.35", "Epoch 2 loss 0.21"]},
            "Worker": {"duration": None, "logs": ["sshd ready"]},  # serve mpirun until the launcher is done
        },
    )

    run, out = run_and_capture(dag, capfd, caplog)

    assert run.state == "success"
    assert re.search(r"\[launcher[^\]]*\] Epoch 2 loss 0\.21", out)  # the launcher has no index
    assert "sshd ready" not in out  # the launcher's log only


def test_mpi_operator_pi(examples_db, scripted_cluster, capfd, caplog):
    dag = load_dag("mpi_operator_pi")
    with_script(
        dag,
        "pi",
        {
            "launcher": {"duration": 0.3, "logs": ["pi is approximately 3.1410376000000002"]},
            "worker": {"duration": None, "logs": ["sshd listening on port 22"]},  # until mpirun is done
        },
    )

    run, out = run_and_capture(dag, capfd, caplog)

    assert run.state == "success"
    assert re.search(r"\[launcher[^\]]*\] pi is approximately 3\.14", out)
    assert "sshd listening" not in out  # the launcher's log only
    launcher_job = scripted_cluster.store.list(
        BATCH_JOBS, "default", label_selector="training.kubeflow.org/job-role=launcher"
    )
    assert [job["spec"]["template"]["spec"]["containers"][0]["command"] for job in launcher_job] == [
        ["mpirun"]
    ]


def test_t9k_job(examples_db, scripted_cluster, capfd, caplog):
    dag = load_dag("t9k_job")
    with_script(dag, "train", {"default": {"duration": 0.3, "logs": ["{pod}: epoch 1 loss 0.27"]}})

    run, out = run_and_capture(dag, capfd, caplog)

    assert run.state == "success"
    result = run.get_task_instance("train").xcom_pull(task_ids="train")
    assert result["kind"] == "PyTorchTrainingJob" and result["state"] == "Succeeded"
    for pod in result["pods"]:
        assert f"{pod}: epoch 1 loss 0.27" in out


def test_edl_training_job(examples_db, scripted_cluster, capfd, caplog):
    """EDL's children carry no owner reference to the job, so their timelines are registered by name."""
    dag = load_dag("edl_training_job")
    logical_date = datetime(2026, 11, 29, tzinfo=UTC)  # and run_after: they make the run id, so the name
    identity = TaskIdentity(dag.dag_id, "train", f"manual__{logical_date.isoformat()}")
    job = default_job_name(identity, get_kind("TrainingJob", "paddlepaddle.org/v1").replica_types)
    register_script(f"{job}-trainer", {"default": {"duration": 0.3, "logs": ["Pass 0, Batch 9, Cost 12.5"]}})
    for serving in ("master", "pserver"):  # serve until the job is deleted
        register_script(f"{job}-{serving}", {"default": {"duration": None, "logs": [f"{serving} ready"]}})
    try:
        run, out = run_and_capture(dag, capfd, caplog, logical_date=logical_date, run_after=logical_date)
    finally:
        for child in ("trainer", "master", "pserver"):
            unregister_script(f"{job}-{child}")

    assert run.state == "success"
    assert run.get_task_instance("train").xcom_pull(task_ids="train")["name"] == job
    assert "Pass 0, Batch 9, Cost 12.5" in out
    assert "pserver ready" in out
    # on_finish_action="delete": the job and the children it left unowned are gone.
    for rt in (REPLICASETS, BATCH_JOBS):
        names = [o["metadata"]["name"] for o in scripted_cluster.store.list(rt, "default")]
        assert not [name for name in names if name.startswith(job)]
