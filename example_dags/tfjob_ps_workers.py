"""A TFJob with parameter servers: a chief coordinates, workers compute, PS replicas hold the variables.

TensorFlow's ``ParameterServerStrategy`` reads the cluster from ``TF_CONFIG``, which the Training Operator
writes into every replica. The PS replicas serve until the job ends; the job succeeds when the chief does,
and the operator then removes the still-running PS pods (``cleanPodPolicy: Running``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_training.operators import TFJobOperator
from airflow_provider_training.specs import tf_job

with DAG(
    "tfjob_ps_workers",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["training", "tensorflow"],
) as dag:
    TFJobOperator(
        task_id="train",
        job=tf_job(
            image="tensorflow/tensorflow:2.16.1",
            command=["python", "/opt/model/train_ps.py"],
            args=["--epochs", "10", "--checkpoint-dir", "/checkpoints/{{ run_id }}"],
            chief=1,
            ps=2,
            workers=3,
            restart_policy="OnFailure",
            resources={"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
            run_policy={"cleanPodPolicy": "Running", "backoffLimit": 3},
        ),
        deferrable=True,
        log_replicas=["Chief", "Worker"],
        on_finish_action="delete_succeeded",
        execution_timeout=timedelta(hours=4),
    )
