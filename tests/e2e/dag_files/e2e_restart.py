"""A deferrable PyTorchJob whose master and worker each log LINES numbered lines, one every 0.5 s (80 s),
for the triggerer restart tests (localkube, scripted); the job is named e2e-restart-<run id>."""

from __future__ import annotations

import json

from airflow.sdk import DAG

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.specs import build_job

LINES = 160
SCRIPT = {"default": {"duration": LINES * 0.5, "logs": [f"line {i:03d}" for i in range(1, LINES + 1)]}}

with DAG("e2e_restart", schedule=None, catchup=False) as dag:
    PyTorchJobOperator(
        task_id="train",
        job=build_job(
            "PyTorchJob",
            image="localkube/scripted:latest",
            command=["python", "train.py"],
            replicas={"Master": 1, "Worker": 1},
            annotations={"localkube.dev/script": json.dumps(SCRIPT)},
        ),
        job_name="e2e-restart-{{ run_id }}",
        deferrable=True,
        log_replicas="all",
        poll_interval=0.5,
    )
