"""Decorated tasks whose replicas follow scripted timelines (the scripted runtime ignores the command):
what the task reads from the deciding replica's log (tests/decorators/test_scripted.py)."""

from __future__ import annotations

import json
from datetime import datetime

from airflow.sdk import DAG, task
from localkube.runtime import ANNOTATION

from airflow_provider_training.decorators.shipping import RESULT_MARKER

START = datetime(2026, 1, 1)


def train() -> dict:
    return {}


def scripted(master_logs: list[str]) -> dict[str, str]:
    """The Master logs ``master_logs``; the Worker logs a return-value line that must not be read."""
    script = {"Master": {"logs": master_logs}, "Worker": {"logs": [RESULT_MARKER + '"the worker"']}}
    return {ANNOTATION: json.dumps(script)}


with DAG("scripted_value", schedule=None, start_date=START, catchup=False) as scripted_value:
    master_logs = ["epoch 1", RESULT_MARKER + '{"early": true}', RESULT_MARKER + '{"loss": 0.25}', "bye"]
    task.pytorch_job(image="i", workers=1, deferrable=True, annotations=scripted(master_logs))(train)()

with DAG("scripted_no_value", schedule=None, start_date=START, catchup=False) as scripted_no_value:
    no_value = task.pytorch_job(image="i", workers=1, retries=0, annotations=scripted(["epoch 1", "done"]))
    no_value(train)()
