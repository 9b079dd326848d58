"""The decorator example trains for real under ``dag.test()``: localkube's process runtime runs the function's
bootstrap in each replica, a PyTorchJob's Master and Worker and a TrainJob's two nodes, which train together
over TCP (numpy)."""

from __future__ import annotations

import pytest

from tests.examples.conftest import load_dag
from tests.examples.test_pytorch_dags import loss_curves, output

pytestmark = pytest.mark.timeout(240)


def test_one_function_trains_on_both_apis_and_returns_the_deciding_replicas_metrics(
    examples_db, process_cluster, capfd, caplog
):
    dag = load_dag("decorated_training")

    run = dag.test()

    assert run.state == "success"
    results = {
        task_id: run.get_task_instance(task_id).xcom_pull(task_ids=task_id)
        for task_id in ("on_pytorchjob", "on_trainjob")
    }
    for metrics in results.values():
        # Rank 0's return value, from a job of two replicas that both trained: the all-reduced sample count
        # is the whole training split (80 % of 4000), half of it on each rank.
        assert metrics["rank"] == 0 and metrics["world_size"] == 2
        assert metrics["trained_samples"] == 3200
        assert metrics["epochs"] == 5 and metrics["val_accuracy"] > 0.9 and metrics["loss"] < 0.6931
    assert results["on_pytorchjob"] == results["on_trainjob"]  # the same function, data and seed
    line = run.get_task_instance("compare").xcom_pull(task_ids="compare")
    assert (
        line.startswith("PyTorchJob: 2 replicas trained on 3200 samples") and "; TrainJob: 2 replicas" in line
    )
    curves = loss_curves(output(capfd, caplog))
    assert sorted(curves) == ["master-0", "node-0", "node-1", "worker-0"]  # every replica trained every epoch
    assert curves["master-0"] == curves["worker-0"] == curves["node-0"] == curves["node-1"]
    losses = [loss for _, loss in curves["master-0"]]
    assert len(losses) == 5 and losses == sorted(losses, reverse=True)
