"""JOBS deferrable PyTorchJobs (one mapped task) that finish 1, 2 or 3 s after they are created, so each
ends seconds after its task deferred (localkube, scripted); names derived from the run and map index."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.testing import scripted_job

JOBS = 20


def job(seconds: int) -> dict:
    script = {"default": {"duration": seconds, "logs": [f"ran {seconds} s"]}}
    return scripted_job("PyTorchJob", script, {"Master": 1})


with DAG("e2e_fast_finish", schedule=None, catchup=False, max_active_tasks=JOBS) as dag:
    PyTorchJobOperator.partial(task_id="train", deferrable=True, poll_interval=0.5).expand(
        job=[job(1 + i % 3) for i in range(JOBS)]
    )
