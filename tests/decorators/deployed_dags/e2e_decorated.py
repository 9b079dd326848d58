"""A deferred ``@task.pytorch_job`` in a real deployment (tests/decorators/test_deployed.py): the Master's
scripted log holds the return value, which the triggerer reads and pushes, and a downstream task consumes."""

from __future__ import annotations

import json
from datetime import datetime

from airflow.sdk import DAG, task
from localkube.runtime import ANNOTATION

from airflow_provider_training.decorators.shipping import RESULT_MARKER

# The replicas run 2 s: the task has deferred by then (what the triggerer ends is a deferred task).
SCRIPT = {
    "default": {"duration": 2.0, "logs": ["training"]},
    "Master": {"logs": ["epoch 1 loss 0.5", RESULT_MARKER + '{"loss": 0.25, "rank": 0}']},
}


@task.pytorch_job(
    image="python:3.11-slim",
    workers=1,
    deferrable=True,
    on_finish_action="delete",
    annotations={ANNOTATION: json.dumps(SCRIPT)},
)
def train() -> dict:
    return {}


@task
def consume(metrics: dict) -> float:
    return metrics["loss"] * 2


with DAG("e2e_decorated", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    consume(train())
