"""A deferrable PyTorchJob whose Worker exits 2 on every run (a wrong script path), restarted in place
(OnFailure) without a backoffLimit: its job never fails, and only the operator's max_restarts ends the task
(localkube, scripted)."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.testing import scripted_job

WRONG_PATH = "python: can't open file '/app/trian.py': [Errno 2] No such file or directory"
SCRIPT = {"default": {"duration": None}, "Worker": {"duration": 0.02, "exit_code": 2, "logs": [WRONG_PATH]}}

JOB = scripted_job(
    "PyTorchJob",
    SCRIPT,
    {"Master": 1, "Worker": 1},
    restart_policy="OnFailure",
    run_policy={"backoffLimit": None},
)

with DAG("e2e_crash_loop", schedule=None, catchup=False) as dag:
    PyTorchJobOperator(
        task_id="train",
        job=JOB,
        job_name="e2e-crash-loop",
        deferrable=True,
        on_finish_action="delete",
        retries=0,
        check_interval=0.5,
    )
