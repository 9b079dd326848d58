"""A deferrable PyTorchJob whose master and worker each log LINES numbered lines, one every 0.5 s (80 s),
for the triggerer restart tests (localkube, scripted); the job is named e2e-restart-<run id>."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.testing import scripted_job

LINES = 160
SCRIPT = {"default": {"duration": LINES * 0.5, "logs": [f"line {i:03d}" for i in range(1, LINES + 1)]}}

with DAG("e2e_restart", schedule=None, catchup=False) as dag:
    PyTorchJobOperator(
        task_id="train",
        job=scripted_job("PyTorchJob", SCRIPT, {"Master": 1, "Worker": 1}),
        job_name="e2e-restart-{{ run_id }}",
        deferrable=True,
        log_replicas="all",
        poll_interval=0.5,
    )
