"""A training function written in the DAG file: ``@task.pytorch_job`` runs it in each replica of a PyTorchJob.

``train`` runs in the Master and in one Worker, data-parallel: each replica trains a logistic-regression
classifier on its shard of the data, averaging gradients with the other replica after every step (an
all-reduce over TCP, rank 0 in the middle). The Master's return value (its metrics) becomes the task's XCom,
which ``report`` reads like any other task's.

The function runs in the pods, not in this file's module: everything it uses it imports itself. Its helpers
(``training/ddp_sgd.py``) come from a directory passed as an argument; the image must hold them (under
localkube's process runtime the pods run on this machine, with this repository's Python).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, task

HELPERS = str(Path(__file__).resolve().parent / "training")


@task.pytorch_job(
    image="python:3.11-slim",  # any image with numpy and the helpers; localkube's process runtime ignores it
    workers=1,
    log_replicas="all",  # both replicas' logs in the task log, each line prefixed by its replica
    deferrable=True,
    execution_timeout=timedelta(minutes=30),
)
def train(helpers: str, epochs: int, lr: float, samples: int = 4000) -> dict:
    """Data-parallel SGD in every replica; returns the Master's metrics."""
    import os
    import sys

    import numpy as np

    sys.path.insert(0, helpers)
    import ddp_sgd

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    features, labels = ddp_sgd.make_data(samples, seed=7)
    cut = int(len(labels) * 0.8)  # the last fifth is held out for validation
    train_set, val_set = (features[:cut], labels[:cut]), (features[cut:], labels[cut:])
    x, y = ddp_sgd.shard(train_set, rank, world_size)
    reducer = ddp_sgd.TcpAllReduce(
        rank, world_size, os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    )
    try:
        w = np.zeros(ddp_sgd.FEATURES)
        loss = float("nan")
        for epoch in range(1, epochs + 1):
            local_loss, grad = ddp_sgd.loss_and_grad(w, x, y)
            reduced = reducer.average(np.append(grad, local_loss))
            w -= lr * reduced[:-1]
            loss = float(reduced[-1])
            print(f"epoch {epoch} loss {loss:.4f}", flush=True)
        # Every replica reports how many samples it trained on: the sum proves they all took part.
        trained = round(reducer.average(np.array([float(len(y))]))[0] * world_size)
    finally:
        reducer.close()
    print(f"rank {rank}/{world_size} done: {len(y)} samples, final loss {loss:.4f}", flush=True)
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
def report(metrics: dict) -> str:
    """Downstream of the training: its return value arrives as a plain dict."""
    line = (
        f"{metrics['world_size']} replicas trained on {metrics['trained_samples']} samples: val_loss "
        f"{metrics['val_loss']:.4f}, accuracy {metrics['val_accuracy']:.3f}"
    )
    print(line)
    return line


with DAG(
    "decorated_training",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["training", "pytorch", "taskflow"],
) as dag:
    report(train(helpers=HELPERS, epochs=5, lr=0.5))
