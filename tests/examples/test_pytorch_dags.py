"""The PyTorch example DAGs train for real under ``dag.test()``: localkube's process runtime runs every
replica of each PyTorchJob as a local process of ``example_dags/training/ddp_sgd.py`` (numpy, over TCP)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.examples.conftest import EXAMPLE_DAGS, load_dag

pytestmark = pytest.mark.timeout(240)

TRAIN_SCRIPT = EXAMPLE_DAGS / "training" / "ddp_sgd.py"
EPOCHS = 4


def output(capfd, caplog) -> str:
    captured = capfd.readouterr()
    return captured.out + captured.err + caplog.text  # where task logs go depends on the set-up order


def loss_curves(out: str) -> dict[str, list[tuple[int, float]]]:
    """What ``make demo`` reads from the same output to summarize the training (scripts/demo.py)."""
    spec = importlib.util.spec_from_file_location("demo", EXAMPLE_DAGS.parent / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo.loss_curves(out)


def test_hyperparameter_sweep_trains_one_job_per_rate_and_picks_the_best(
    examples_db, process_cluster, tmp_path, capfd, caplog
):
    dag = load_dag("hyperparameter_sweep")

    run = dag.test(run_conf={"out": str(tmp_path), "epochs": EPOCHS, "learning_rates": [0.05, 0.2, 0.8]})

    assert run.state == "success"
    trials = run.get_task_instances()
    assert sorted(ti.map_index for ti in trials if ti.task_id == "trial") == [0, 1, 2]
    written = {path.stem: json.loads(path.read_text()) for path in (tmp_path / run.run_id).glob("*.json")}
    assert sorted(written) == ["0.05", "0.2", "0.8"]
    assert all(metrics["world_size"] == 2 and metrics["epochs"] == EPOCHS for metrics in written.values())
    best = run.get_task_instance("pick_best").xcom_pull(task_ids="pick_best")
    assert best == min(written.values(), key=lambda metrics: metrics["val_loss"])
    curves = loss_curves(output(capfd, caplog))
    assert [epoch for epoch, _ in curves["master-0"]] == [*range(1, EPOCHS + 1)] * 3  # one job after another


def snapshot(root, name: str, seed: int) -> None:
    """What an upstream system does: drop a data snapshot into ``incoming/``."""
    path = root / "incoming" / f"{name}.npz"
    command = [sys.executable, str(TRAIN_SCRIPT), "--make-data", str(path), "--seed", str(seed)]
    subprocess.run(command, check=True, capture_output=True)


def states(run) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def test_retraining_pipeline_promotes_a_better_model_and_keeps_production_otherwise(
    examples_db, process_cluster, tmp_path, capfd, caplog
):
    dag = load_dag("retraining_pipeline")
    production = tmp_path / "registry" / "production"
    snapshot(tmp_path, "2026-11-28", seed=3)

    first = dag.test(run_conf={"root": str(tmp_path), "epochs": EPOCHS})

    assert first.state == "success"
    assert states(first) == {
        "wait_for_new_data": "success",
        "train": "success",
        "evaluate": "success",
        "decide": "success",
        "promote": "success",
        "keep_production": "skipped",
    }
    curves = loss_curves(output(capfd, caplog))
    assert sorted(curves) == ["master-0", "worker-0"]  # both replicas' logs, prefixed by replica
    for points in curves.values():  # every epoch, and the loss falls
        assert [epoch for epoch, _ in points] == list(range(1, EPOCHS + 1))
        losses = [loss for _, loss in points]
        assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0]
    promoted = json.loads((production / "metrics.json").read_text())
    assert promoted["world_size"] == 2 and promoted["data"].endswith("2026-11-28.npz")
    assert "baseline_val_loss" not in promoted  # nothing in production yet: better by default

    # A second snapshot (the same data again): one epoch trains a worse model than the production one.
    snapshot(tmp_path, "2026-11-29", seed=3)
    second = dag.test(run_conf={"root": str(tmp_path), "epochs": 1})

    assert second.state == "success"
    assert states(second)["promote"] == "skipped" and states(second)["keep_production"] == "success"
    report = second.get_task_instance("evaluate").xcom_pull(task_ids="evaluate")
    assert report["snapshot"] == "2026-11-29" and report["better"] is False
    assert report["metrics"]["val_loss"] > report["metrics"]["baseline_val_loss"]
    assert json.loads((production / "metrics.json").read_text()) == promoted
    assert len((tmp_path / "registry" / "history.jsonl").read_text().splitlines()) == 1


def test_train_job_trains_on_two_nodes_of_the_torch_runtime_and_reports_node_0s_metrics(
    examples_db, process_cluster, tmp_path, capfd, caplog
):
    dag = load_dag("train_job")

    run = dag.test(run_conf={"out": str(tmp_path), "epochs": EPOCHS})

    assert run.state == "success"
    reported = run.get_task_instance("report").xcom_pull(task_ids="report")
    assert reported["world_size"] == 2 and reported["epochs"] == EPOCHS
    assert reported == {"job": reported["job"], **json.loads((tmp_path / f"{run.run_id}.json").read_text())}
    curves = loss_curves(output(capfd, caplog))
    assert sorted(curves) == ["node-0", "node-1"]  # both nodes' logs, prefixed by replicated job and index
    for points in curves.values():
        assert [epoch for epoch, _ in points] == list(range(1, EPOCHS + 1))
