"""Scheduled retraining: wait for a new data snapshot, train on it data-parallel, evaluate, promote if better.

Everything lives under the ``root`` param (default ``$RETRAINING_ROOT``, else ``~/retraining``), which the
Airflow worker and the training pods share (one machine under localkube's process runtime; a mounted
volume on a cluster)::

    incoming/<snapshot>.npz          data snapshots an upstream system drops, named to sort by time
    candidates/<snapshot>/           what training on a snapshot wrote: metrics.json, model.json
    registry/production/             the promoted model: model.json, metrics.json
    registry/history.jsonl           one line per promotion

A snapshot is new until a candidate was trained on it. The training also scores the production model on
the new snapshot's validation split, so both models are compared on the same data.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param, PokeReturnValue, task

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.specs import pytorch_job

TRAIN_SCRIPT = Path(__file__).resolve().parent / "training" / "ddp_sgd.py"
# Templates the operator renders at run time.
ROOT = "{{ params.root }}"
SNAPSHOT = "{{ ti.xcom_pull(task_ids='wait_for_new_data') }}"
CANDIDATE = f"{ROOT}/candidates/{SNAPSHOT}"


@task.sensor(poke_interval=60, timeout=timedelta(hours=20).total_seconds(), mode="reschedule")
def wait_for_new_data(params: dict) -> PokeReturnValue:
    """The newest snapshot in ``incoming/`` that no candidate was trained on yet."""
    root = Path(params["root"])
    trained = {path.parent.name for path in root.glob("candidates/*/metrics.json")}
    new = sorted({path.stem for path in root.glob("incoming/*.npz")} - trained)
    return PokeReturnValue(is_done=bool(new), xcom_value=new[-1] if new else None)


@task
def evaluate(snapshot: str, params: dict) -> dict:
    """Compare the candidate with the production model on the new snapshot's validation data."""
    metrics = json.loads((Path(params["root"]) / "candidates" / snapshot / "metrics.json").read_text())
    production = metrics.get("baseline_val_loss")
    better = production is None or metrics["val_loss"] < production - params["min_improvement"]
    print(f"candidate val_loss {metrics['val_loss']:.4f}, production {production}: better={better}")
    return {"snapshot": snapshot, "better": better, "metrics": metrics}


@task.branch
def decide(report: dict) -> str:
    return "promote" if report["better"] else "keep_production"


@task
def promote(report: dict, params: dict) -> str:
    """Replace the production model with the candidate (a rename, so readers never see half of it)."""
    registry = Path(params["root"]) / "registry"
    staging = registry / f".staging-{report['snapshot']}"
    staging.mkdir(parents=True, exist_ok=True)
    for name in ("model.json", "metrics.json"):
        candidate = Path(params["root"]) / "candidates" / report["snapshot"] / name
        (staging / name).write_text(candidate.read_text())
    production, retired = registry / "production", registry / f".retired-{report['snapshot']}"
    if production.exists():
        production.rename(retired)
    staging.rename(production)
    shutil.rmtree(retired, ignore_errors=True)  # every candidate stays in candidates/
    with (registry / "history.jsonl").open("a") as history:
        history.write(json.dumps({"snapshot": report["snapshot"], **report["metrics"]}) + "\n")
    return str(production)


with DAG(
    "retraining_pipeline",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={
        "root": Param(os.environ.get("RETRAINING_ROOT", str(Path.home() / "retraining")), type="string"),
        "epochs": Param(20, type="integer", minimum=1),
        "min_improvement": Param(0.0, type="number", description="val_loss the candidate must gain"),
    },
    tags=["training", "pytorch"],
) as dag:
    snapshot = wait_for_new_data()
    train = PyTorchJobOperator(
        task_id="train",
        job=pytorch_job(
            image="python:3.11-slim",  # any image with numpy and the script; localkube runs it locally
            command=["python", str(TRAIN_SCRIPT)],
            args=[
                *("--data", f"{ROOT}/incoming/{SNAPSHOT}.npz", "--epochs", "{{ params.epochs }}"),
                *("--metrics-out", f"{CANDIDATE}/metrics.json", "--model-out", f"{CANDIDATE}/model.json"),
                *("--baseline-model", f"{ROOT}/registry/production/model.json"),
            ],
            master=1,
            workers=1,
            restart_policy="OnFailure",  # a failing replica restarts in place...
            run_policy={"backoffLimit": 2},  # ...and fails the job after 2 restarts
        ),
        deferrable=True,
        log_replicas="all",
        on_finish_action="delete_succeeded",
        execution_timeout=timedelta(hours=2),
    )
    report = evaluate(snapshot)
    snapshot >> train >> report
    decide(report) >> [promote(report), EmptyOperator(task_id="keep_production")]
