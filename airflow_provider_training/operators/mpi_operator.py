"""The standalone MPI Operator's MPIJob operator (``kubeflow.org/v2beta1``).

Suspend and resume it with the generic
:class:`~airflow_provider_training.operators.TrainingJobSuspendOperator` and
:class:`~airflow_provider_training.operators.TrainingJobResumeOperator` (``kind="MPIJob"``,
``api_version="kubeflow.org/v2beta1"``): they send its ``spec.runPolicy.suspend``.
"""

from __future__ import annotations

from airflow_provider_training.operators.training import TrainingJobOperator


class MPIJobV2Beta1Operator(TrainingJobOperator):
    """Submit an MPI Operator MPIJob (``kubeflow.org/v2beta1``) and wait for it (see
    :class:`TrainingJobOperator`). A cluster serves one MPIJob version: for the Training Operator's
    ``kubeflow.org/v1`` MPIJob use :class:`MPIJobOperator`."""

    job_kind, job_api_version = "MPIJob", "kubeflow.org/v2beta1"
