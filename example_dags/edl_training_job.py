"""A PaddlePaddle EDL TrainingJob: fault-tolerant, elastic parameter-server training of "fit a line".

The EDL controller starts a master and the parameter servers as ReplicaSets and the trainers as a batch
Job; the job's state is read from those children, since EDL writes no status of its own. The children
carry no owner reference either, so the operator deletes them with the job (``on_finish_action``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_training.operators import PaddleEDLTrainingJobOperator

JOB = {
    "apiVersion": "paddlepaddle.org/v1",
    "kind": "TrainingJob",
    "spec": {
        "image": "paddlepaddle/edl-example",
        "port": 7164,
        "ports_num": 1,
        "ports_num_for_sparse": 1,
        "fault_tolerant": True,
        "passes": 50,
        "trainer": {
            "entrypoint": "python /workspace/train_ft.py",
            "workspace": "/workspace",
            "min-instance": 2,
            "max-instance": 6,
            "resources": {"requests": {"cpu": "200m", "memory": "200Mi"}},
        },
        "pserver": {"min-instance": 2, "max-instance": 2, "resources": {"requests": {"cpu": "500m"}}},
        "master": {"resources": {"requests": {"cpu": "500m", "memory": "600Mi"}}},
    },
}

with DAG(
    "edl_training_job",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["training", "paddlepaddle", "edl"],
) as dag:
    PaddleEDLTrainingJobOperator(
        task_id="train",
        job=JOB,
        deferrable=True,
        log_replicas="all",
        on_finish_action="delete",
        execution_timeout=timedelta(hours=2),
    )
