"""A DAG as a user writes it: train a PyTorchJob (deferrable), then check it with the sensor (both modes)."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.sensors import PyTorchJobSensor
from airflow_provider_training.testing import scripted_job

# localkube's scripted runtime: every replica logs two lines and exits 0 after 0.2 s.
SCRIPT = {"default": {"duration": 0.2, "logs": ["epoch 1 loss 0.41", "model saved"]}}

JOB = scripted_job("PyTorchJob", SCRIPT, {"Master": 1, "Worker": 2})

with DAG("train_and_check", schedule=None, catchup=False) as dag:
    train = PyTorchJobOperator(
        task_id="train",
        job=JOB,
        job_name="{{ dag.dag_id | replace('_', '-') }}-{{ ds_nodash }}",
        deferrable=True,
        check_interval=0.2,
    )
    # The check in deferrable mode, and the same in poke mode: both push the same XCom value.
    checks = [
        PyTorchJobSensor(
            task_id=task_id,
            job_name="{{ ti.xcom_pull(task_ids='train')['name'] }}",
            deferrable=deferrable,
            poke_interval=0.2,
            timeout=60,
        )
        for task_id, deferrable in (("check", True), ("check_poke", False))
    ]
    train >> checks
    # The same wait, run inline in the worker (sync mode), under the real task runner.
    train_sync = PyTorchJobOperator(task_id="train_sync", job=JOB, deferrable=False, check_interval=0.2)
