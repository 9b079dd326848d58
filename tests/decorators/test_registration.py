"""Airflow finds the decorators through the provider's ``task-decorators``; DAG files stay cheap to parse."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.test_imports import HEAVY


def test_airflow_sdk_task_has_the_provider_decorators():
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk import task

    from airflow_provider_training.decorators.pytorch_job import pytorch_job_task
    from airflow_provider_training.decorators.train_job import train_job_task

    info = ProvidersManager().providers["airflow-provider-training"].data
    assert {d["name"] for d in info["task-decorators"]} == {"pytorch_job", "train_job"}
    assert task.pytorch_job is pytorch_job_task
    assert task.train_job is train_job_task


def test_a_dag_with_the_decorators_parses_without_a_client(tmp_path):
    """Decorating and calling (the DAG file's parse) loads no Kubernetes client, no job specs."""
    dag_file = tmp_path / "parse_only.py"
    dag_file.write_text(
        """
import json, sys
from datetime import datetime
from airflow.sdk import DAG, task

def train(x: int) -> int:
    return x

with DAG("parse_only", schedule=None, start_date=datetime(2026, 1, 1)):
    task.pytorch_job(image="python:3.11-slim", workers=2)(train)(1)
    task.train_job(runtime="torch-distributed", num_nodes=2)(train)(2)
print(json.dumps(sorted(m for m in HEAVY if m in sys.modules)))
""".replace("HEAVY", repr(list(HEAVY)))
    )
    out = subprocess.run([sys.executable, str(dag_file)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
