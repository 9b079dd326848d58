"""Deferrable PyTorchJobs on a real kube-apiserver whose replicas are local processes (localkube agent,
process runtime). Each replica prints the variables the training operator set, then waits for its job's
release file, ``$REAL_E2E_RELEASE_DIR/<job name>``, which the test creates once it has seen what it waits for.

- ``real_train``: ``train`` succeeds; the master of ``train_fails`` exits 3 with a RuntimeError.
- ``real_restart``: one job, for a triggerer restart while its trigger waits.

Jobs are named ``<run id>-<task>``; the connection's namespace is theirs.
"""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_provider_training.operators import PyTorchJobOperator
from airflow_provider_training.specs import pytorch_job

RELEASE_DIR = os.environ.get("REAL_E2E_RELEASE_DIR", "/nonexistent")
REPLICA = """
import os, pathlib, sys, time
names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
seen = " ".join(f"{name}={os.environ.get(name)}" for name in names)
print(f"{os.environ['HOSTNAME']} started: {seen}", flush=True)
release = pathlib.Path(os.environ["RELEASE"])
while not release.exists():
    time.sleep(0.05)
if os.environ["RANK"] == "0" and os.environ["MASTER_EXIT_CODE"] != "0":
    print("RuntimeError: shard 7 is corrupt", file=sys.stderr, flush=True)
    sys.exit(int(os.environ["MASTER_EXIT_CODE"]))
print("model saved", flush=True)
"""


def training(task_id: str, master_exit_code: int = 0) -> PyTorchJobOperator:
    name = "{{ run_id }}-" + task_id.replace("_", "-")
    job = pytorch_job(
        image="python:3.12-slim",  # ignored by the process runtime, which runs the command locally
        command=["python", "-c", REPLICA],
        master=1,
        workers=1,
        restart_policy="Never",
        env={"RELEASE": f"{RELEASE_DIR}/{name}", "MASTER_EXIT_CODE": str(master_exit_code)},
    )
    return PyTorchJobOperator(
        task_id=task_id, job=job, job_name=name, deferrable=True, log_replicas="all", poll_interval=0.5
    )


with DAG("real_train", schedule=None, catchup=False) as dag:
    training("train")
    training("train_fails", master_exit_code=3)

with DAG("real_restart", schedule=None, catchup=False) as restart_dag:
    training("train")
