"""The default ``log_replicas`` follows the replica type that decides the job, and the task log says which:
also for the upstream PaddleJob examples whose pods carry no master role (Workers only), where following the
master role streamed nothing (the MXJob tune job's choice is in tests/kinds/test_deciding_replica.py)."""

from __future__ import annotations

import pytest

from airflow_provider_training import operators
from tests.fixtures import upstream_example
from tests.operators.harness import KIND_BY_NAME, MODES, make_context, manifest, run_operator

pytestmark = pytest.mark.timeout(30)
SCRIPT = {"default": {"duration": 0.1, "logs": ["{type}-{index} says hi"]}}


@pytest.mark.parametrize("mode", MODES)
def test_paddle_workers_only_streams_the_workers(cluster, mode, capsys):
    job = upstream_example("kubeflow-v1", "paddlepaddle_simple-cpu.yaml", script=SCRIPT, namespace="default")
    job["metadata"]["name"] = f"paddle-simple-{mode[:4]}"
    op = operators.PaddleJobOperator(task_id="train", job=job, check_interval=0.2)

    assert run_operator(op, make_context(), mode)["state"] == "Succeeded"

    out = capsys.readouterr().out
    assert f"Streaming the logs of the Worker replicas of PaddleJob default/{job['metadata']['name']}" in out
    assert "[worker-0] worker-0 says hi" in out and "[worker-1] worker-1 says hi" in out


@pytest.mark.parametrize(
    "log_replicas,followed",
    [(["worker"], "the worker replicas"), ("all", "all replicas")],
)
def test_the_task_log_says_which_replicas_it_follows(cluster, capsys, log_replicas, followed):
    case = KIND_BY_NAME["PyTorchJob"]
    name = f"says-{len(followed)}"
    op = operators.PyTorchJobOperator(
        task_id="train", job=manifest(case, SCRIPT, name=name), check_interval=0.2, log_replicas=log_replicas
    )

    run_operator(op, make_context(), "sync")

    out = capsys.readouterr().out
    assert f"Streaming the logs of {followed} of PyTorchJob default/{name}" in out
    assert ("[master-0] master-0 says hi" in out) == (log_replicas == "all")
    assert "[worker-0] worker-0 says hi" in out


def test_pytorch_default_streams_the_master_only(cluster, capsys):
    case = KIND_BY_NAME["PyTorchJob"]
    op = operators.PyTorchJobOperator(
        task_id="train", job=manifest(case, SCRIPT, name="says-master"), check_interval=0.2
    )

    run_operator(op, make_context(), "sync")

    out = capsys.readouterr().out
    assert "Streaming the logs of the Master replicas of PyTorchJob default/says-master" in out
    assert "[master-0] master-0 says hi" in out and "worker-0 says hi" not in out
