"""Estimate pi with MPI on the standalone MPI Operator (``kubeflow.org/v2beta1`` MPIJob).

The MPI Operator's v2beta1 MPIJob succeeds the Training Operator's v1 one; both are named
``mpijobs.kubeflow.org``, so a cluster serves one of them. On a cluster that serves the other, the task fails
before submitting anything and names the version the cluster serves (use :class:`MPIJobOperator` there).

The manifest is upstream's ``examples/v2beta1/pi/pi.yaml`` (``manifests/mpi_operator_pi.yaml``): the workers
run sshd, the launcher ``mpirun``. Its launcher Job starts once every worker runs (``WaitForWorkersReady``),
so ``mpirun`` never races the workers' sshd. The job succeeds when the launcher does, and the launcher's log
is the one the task shows (the default ``log_replicas="master"``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_training.operators import MPIJobV2Beta1Operator

with DAG(
    "mpi_operator_pi",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["training", "mpi", "mpi-operator"],
) as dag:
    MPIJobV2Beta1Operator(
        task_id="pi",
        job="manifests/mpi_operator_pi.yaml",
        deferrable=True,
        execution_timeout=timedelta(minutes=30),
    )
