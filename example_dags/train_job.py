"""Kubeflow Trainer v2: a TrainJob on the cluster's ``torch-distributed`` runtime, then its metrics.

A TrainJob names a runtime (here upstream's ClusterTrainingRuntime ``torch-distributed``) and overrides what
this training needs: the image, the command and the number of nodes. The Trainer controller turns both into
a JobSet whose ``node`` Job runs one pod per node, with the torch rendezvous in ``PET_*`` variables (what
``torchrun`` reads; ``training/ddp_sgd.py`` reads them too, one process per node). Before anything is sent,
the operator checks that the runtime exists: a typo in its name fails the task at once, with nothing created.

Node 0 decides the job and writes the metrics to ``<out>/<run id>.json`` (a directory the Airflow worker and
the pods share); ``report`` reads them. The result also carries the TrainJob's ``trainerStatus`` as
``progress`` where the runtime reports it (Trainer v2.2 and later). Suspend and resume a running TrainJob with
``TrainingJobSuspendOperator`` / ``TrainingJobResumeOperator`` (``kind="TrainJob"``).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_provider_training.operators import TrainJobOperator

TRAIN_SCRIPT = Path(__file__).resolve().parent / "training" / "ddp_sgd.py"
NODES = 2


@task
def report(params: dict, run_id: str, result: dict) -> dict:
    """Node 0's metrics, with the TrainJob's outcome."""
    metrics = json.loads((Path(params["out"]) / f"{run_id}.json").read_text())
    nodes = len(result["pods"])
    print(f"{result['name']}: {result['state']} on {nodes} nodes, val_loss {metrics['val_loss']:.4f}")
    return {"job": result["name"], **metrics}


with DAG(
    "train_job",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={
        "out": Param(os.environ.get("TRAIN_JOB_OUT", str(Path.home() / "train-job")), type="string"),
        "epochs": Param(10, type="integer", minimum=1),
    },
    tags=["training", "kubeflow-trainer", "pytorch"],
) as dag:
    train = TrainJobOperator(
        task_id="train",
        runtime="torch-distributed",
        trainer={
            "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",  # localkube runs the script locally
            "command": ["python", str(TRAIN_SCRIPT)],
            "args": [
                "--epochs",
                "{{ params.epochs }}",
                "--metrics-out",
                "{{ params.out }}/{{ run_id }}.json",
            ],
            "numNodes": NODES,  # a number (templates render to text: numNodes must be an integer)
        },
        deferrable=True,
        log_replicas="all",
        execution_timeout=timedelta(hours=2),
    )
    report(result=train.output)
