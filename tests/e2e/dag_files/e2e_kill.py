"""Deferrable PyTorchJobs that run until deleted, one DAG per ``on_kill_action`` (localkube, scripted)."""

from __future__ import annotations

import json

from airflow.sdk import DAG

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.specs import build_job

SCRIPT = {"default": {"duration": None, "logs": ["step 1"]}}  # runs until its pod is deleted

for action in ("delete", "keep"):
    with DAG(f"e2e_kill_{action}", schedule=None, catchup=False) as dag:
        PyTorchJobOperator(
            task_id="train",
            job=build_job(
                "PyTorchJob",
                image="localkube/scripted:latest",
                command=["python", "train.py"],
                replicas={"Master": 1},
                annotations={"localkube.dev/script": json.dumps(SCRIPT)},
            ),
            job_name=f"e2e-kill-{action}",
            deferrable=True,
            on_kill_action=action,
            poll_interval=0.5,
        )
    globals()[dag.dag_id] = dag
