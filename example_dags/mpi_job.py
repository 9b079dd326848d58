"""An MPIJob running Horovod: the Launcher starts ``mpirun`` across the Workers' slots.

With ``kubeflow.org/v1`` MPIJobs the Workers only wait for the Launcher's ``mpirun``; the job succeeds when
the Launcher does, so its log is the one that matters (the default ``log_replicas="master"``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_training.operators import MPIJobOperator
from airflow_provider_training.specs import mpi_job

WORKERS = 2

with DAG(
    "mpi_job",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["training", "mpi", "horovod"],
) as dag:
    MPIJobOperator(
        task_id="train",
        job=mpi_job(
            image="horovod/horovod:0.28.1",
            command=["mpirun", "-np", str(WORKERS), "--allow-run-as-root", "-bind-to", "none"],
            args=["-map-by", "slot", "python", "/horovod/examples/tensorflow2/tensorflow2_mnist.py"],
            workers=WORKERS,
            slots_per_worker=1,
            resources={"limits": {"cpu": "2", "memory": "4Gi"}},
            run_policy={"cleanPodPolicy": "Running"},
        ),
        deferrable=True,
        on_finish_action="delete_succeeded",
        execution_timeout=timedelta(hours=2),
    )
