"""A TensorStack T9k PyTorchTrainingJob: two nodes train with torchrun and DDP over gloo (CPU only).

T9k jobs list their replicas under ``replicaSpecs`` (one entry per type). In torchrun mode the container's
``args`` follow ``torchrun`` and T9k fills in the rendezvous; ``runPolicy.cleanUpPolicy`` removes the pods
once the job is done.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_training.operators import T9kPyTorchTrainingJobOperator

JOB = {
    "apiVersion": "batch.tensorstack.dev/v1beta1",
    "kind": "PyTorchTrainingJob",
    "spec": {
        "torchrunConfig": {"enabled": True, "maxRestarts": 3, "procPerNode": "2", "rdzvBackend": "c10d"},
        "runPolicy": {"cleanUpPolicy": "Unfinished"},
        "replicaSpecs": [
            {
                "type": "node",
                "replicas": 2,
                "restartPolicy": "OnFailure",
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "pytorch",
                                "image": "t9kpublic/pytorch-1.13.0:sdk-0.5.2",
                                "args": ["torch_mnist_trainingjob.py", "--backend", "gloo", "--no_cuda"],
                                "workingDir": "/t9k/mnt/tutorial-examples/job/pytorchtrainingjob/ddp",
                                "resources": {"requests": {"cpu": "4", "memory": "4Gi"}},
                            }
                        ]
                    }
                },
            }
        ],
    },
}

with DAG(
    "t9k_job",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["training", "t9k", "pytorch"],
) as dag:
    T9kPyTorchTrainingJobOperator(
        task_id="train",
        job=JOB,
        deferrable=True,
        log_replicas="all",
        execution_timeout=timedelta(hours=2),
    )
