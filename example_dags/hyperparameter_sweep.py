"""A learning-rate sweep: one data-parallel PyTorchJob per learning rate, mapped at run time, then the best.

The ``learning_rates`` param (change it when triggering) becomes one job each; ``PyTorchJobOperator
.partial(...).expand(job=...)`` makes one mapped task instance per job, and each gets its own job name (from
the map index), so a retry reattaches to the right job. Every trial writes its metrics to
``<out>/<run id>/<rate>.json``, a directory the Airflow worker and the pods share.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.specs import pytorch_job

TRAIN_SCRIPT = Path(__file__).resolve().parent / "training" / "ddp_sgd.py"


@task
def trial_jobs(params: dict, run_id: str) -> list[dict]:
    """One PyTorchJob per learning rate of this run (values mapped from XCom are not templated: no Jinja)."""
    out = Path(params["out"]) / run_id
    return [
        pytorch_job(
            image="python:3.11-slim",  # any image with numpy and the script; localkube runs it locally
            command=["python", str(TRAIN_SCRIPT)],
            args=["--lr", str(lr), "--epochs", str(params["epochs"]), "--metrics-out", f"{out}/{lr}.json"],
            master=1,
            workers=1,
            restart_policy="OnFailure",  # a failing replica restarts in place...
            run_policy={"backoffLimit": 2},  # ...and fails the job after 2 restarts
        )
        for lr in params["learning_rates"]
    ]


@task
def pick_best(params: dict, run_id: str) -> dict:
    """The trial with the lowest validation loss."""
    trials = [json.loads(path.read_text()) for path in (Path(params["out"]) / run_id).glob("*.json")]
    for m in sorted(trials, key=lambda m: m["lr"]):
        print(f"lr {m['lr']}: val_loss {m['val_loss']:.4f}, accuracy {m['val_accuracy']:.3f}")
    best = min(trials, key=lambda m: m["val_loss"])
    print(f"best: lr {best['lr']}")
    return best


with DAG(
    "hyperparameter_sweep",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "out": Param(os.environ.get("SWEEP_OUT", str(Path.home() / "sweeps")), type="string"),
        "learning_rates": Param([0.05, 0.2, 0.8], type="array", items={"type": "number"}, minItems=1),
        "epochs": Param(10, type="integer", minimum=1),
    },
    tags=["training", "pytorch", "sweep"],
) as dag:
    trials = PyTorchJobOperator.partial(
        task_id="trial",
        deferrable=True,
        on_finish_action="delete_succeeded",
        execution_timeout=timedelta(hours=1),
    ).expand(job=trial_jobs())
    trials >> pick_best()
