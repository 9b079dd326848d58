"""Operators for the TensorStack T9k jobs (``batch.tensorstack.dev/v1beta1``).

One per training-job kind, a generic :class:`T9kJobOperator` for the others (DeepSpeedJob, ColossalAIJob,
T9k's MPIJob, GenericJob) by ``kind``, and pause/resume (``spec.runMode.pause.enabled``).
"""

from __future__ import annotations

from airflow_provider_training.operators.control import (
    TrainingJobResumeOperator,
    TrainingJobSuspendOperator,
)
from airflow_provider_training.operators.training import TrainingJobOperator

T9K = "batch.tensorstack.dev/v1beta1"


class T9kJobOperator(TrainingJobOperator):
    """Submit any T9k job, e.g. ``kind="DeepSpeedJob"``, and wait for it (see :class:`TrainingJobOperator`).

    ``kind="MPIJob"`` is T9k's MPIJob here, not Kubeflow's. Waiting for ``Succeeded`` on a job in debug
    mode (``spec.runMode.debug.enabled``) is refused before anything is sent: it never succeeds.
    """

    job_api_version = T9K


class T9kTensorFlowTrainingJobOperator(T9kJobOperator):
    """Submit a T9k TensorFlowTrainingJob and wait for it (see :class:`T9kJobOperator`)."""

    job_kind = "TensorFlowTrainingJob"


class T9kPyTorchTrainingJobOperator(T9kJobOperator):
    """Submit a T9k PyTorchTrainingJob and wait for it (see :class:`T9kJobOperator`)."""

    job_kind = "PyTorchTrainingJob"


class T9kXGBoostTrainingJobOperator(T9kJobOperator):
    """Submit a T9k XGBoostTrainingJob and wait for it (see :class:`T9kJobOperator`)."""

    job_kind = "XGBoostTrainingJob"


class T9kPauseJobOperator(TrainingJobSuspendOperator):
    """Pause a T9k job of ``kind`` (its pods are deleted until it is resumed)."""

    job_api_version = T9K


class T9kResumeJobOperator(TrainingJobResumeOperator):
    """Resume a paused T9k job of ``kind``."""

    job_api_version = T9K
