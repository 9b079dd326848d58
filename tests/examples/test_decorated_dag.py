"""The ``@task.pytorch_job`` example trains for real under ``dag.test()``: localkube's process runtime runs
the function's bootstrap in a Master and a Worker process, which train together over TCP (numpy)."""

from __future__ import annotations

import pytest

from tests.examples.conftest import load_dag
from tests.examples.test_pytorch_dags import loss_curves, output

pytestmark = pytest.mark.timeout(240)


def test_decorated_training_returns_the_masters_metrics_to_the_next_task(
    examples_db, process_cluster, capfd, caplog
):
    dag = load_dag("decorated_training")

    run = dag.test()

    assert run.state == "success"
    metrics = run.get_task_instance("train").xcom_pull(task_ids="train")
    # Rank 0's return value, from a job of two replicas that both trained: the all-reduced sample count is
    # the whole training split (80 % of 4000), half of it on each rank.
    assert metrics["rank"] == 0 and metrics["world_size"] == 2
    assert metrics["trained_samples"] == 3200
    assert metrics["epochs"] == 5 and metrics["val_accuracy"] > 0.9 and metrics["loss"] < 0.6931
    line = run.get_task_instance("report").xcom_pull(task_ids="report")
    assert line == (
        f"2 replicas trained on 3200 samples: val_loss {metrics['val_loss']:.4f}, "
        f"accuracy {metrics['val_accuracy']:.3f}"
    )
    curves = loss_curves(output(capfd, caplog))
    assert sorted(curves) == ["master-0", "worker-0"]  # both replicas trained, every epoch, the same loss
    assert curves["master-0"] == curves["worker-0"]
    losses = [loss for _, loss in curves["master-0"]]
    assert len(losses) == 5 and losses == sorted(losses, reverse=True)
