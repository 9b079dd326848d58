"""A training function written in the DAG file, run by every replica of a distributed job: one function,
two APIs. ``@task.pytorch_job`` runs it in a Kubeflow v1 PyTorchJob (a Master and a Worker),
``@task.train_job`` in a Kubeflow Trainer v2 TrainJob on the cluster's ``torch-distributed`` runtime (two
nodes), as a team moving from the Training Operator to Trainer v2 would run both side by side.

``train`` is data-parallel: each replica trains a logistic-regression classifier on its shard of the data,
averaging gradients with the others after every step (an all-reduce over TCP, rank 0 in the middle). It reads
its rank from either job's env (``RANK``/``WORLD_SIZE``/``MASTER_*`` in a PyTorchJob, the ``PET_*`` torchrun
variables in a TrainJob). The deciding replica's return value (the Master's, node 0's) becomes the task's
XCom, which ``compare`` reads like any other task's.

The function runs in the pods, not in this file's module: everything it uses it imports itself. Its helpers
(``training/ddp_sgd.py``) come from a directory passed as an argument; the image must hold them (under
localkube's process runtime the pods run on this machine, with this repository's Python).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, task

HELPERS = str(Path(__file__).resolve().parent / "training")
IMAGE = "python:3.11-slim"  # any image with numpy and the helpers; localkube's process runtime ignores it
JOB_OPTIONS = {
    "log_replicas": "all",  # every replica's log in the task log, each line prefixed by its replica
    "deferrable": True,
    "execution_timeout": timedelta(minutes=30),
}


def train(helpers: str, epochs: int, lr: float, samples: int = 4000) -> dict:
    """Data-parallel SGD in every replica; returns this replica's metrics (rank 0's become the XCom)."""
    import os
    import sys

    sys.path.insert(0, helpers)
    import ddp_sgd

    rank, world_size, master, port = ddp_sgd.rendezvous(os.environ)
    features, labels = ddp_sgd.make_data(samples, seed=7)
    cut = int(len(labels) * 0.8)  # the last fifth is held out for validation
    train_set, val_set = (features[:cut], labels[:cut]), (features[cut:], labels[cut:])
    loss, w, trained = ddp_sgd.data_parallel_sgd(
        train_set, rank, world_size, master, port, epochs=epochs, lr=lr
    )
    return {
        "rank": rank,
        "world_size": world_size,
        "epochs": epochs,
        "lr": lr,
        "loss": loss,
        "trained_samples": trained,
        **ddp_sgd.evaluate(w, 0.0, val_set),
    }


@task
def compare(on_pytorchjob: dict, on_trainjob: dict) -> str:
    """Downstream of both trainings: their return values arrive as plain dicts."""
    line = "; ".join(
        f"{name}: {m['world_size']} replicas trained on {m['trained_samples']} samples, "
        f"val_loss {m['val_loss']:.4f}, accuracy {m['val_accuracy']:.3f}"
        for name, m in (("PyTorchJob", on_pytorchjob), ("TrainJob", on_trainjob))
    )
    print(line)
    return line


with DAG(
    "decorated_training",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["training", "pytorch", "kubeflow-trainer", "taskflow"],
) as dag:
    on_pytorchjob = task.pytorch_job(task_id="on_pytorchjob", image=IMAGE, workers=1, **JOB_OPTIONS)(train)
    on_trainjob = task.train_job(
        task_id="on_trainjob", runtime="torch-distributed", num_nodes=2, image=IMAGE, **JOB_OPTIONS
    )(train)
    compare(on_pytorchjob(HELPERS, epochs=5, lr=0.5), on_trainjob(HELPERS, epochs=5, lr=0.5))
