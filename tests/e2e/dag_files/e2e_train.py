"""A deferrable PyTorchJob whose replicas run about 3 s and log on master and worker (localkube, scripted)."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.testing import scripted_job

SCRIPT = {"default": {"duration": 3, "logs": ["epoch 1 loss 0.41", "epoch 2 loss 0.30", "model saved"]}}

JOB = scripted_job("PyTorchJob", SCRIPT, {"Master": 1, "Worker": 1})

with DAG("e2e_train", schedule=None, catchup=False) as dag:
    PyTorchJobOperator(
        task_id="train", job=JOB, job_name="e2e-train", deferrable=True, log_replicas="all", poll_interval=0.5
    )
