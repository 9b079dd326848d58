"""Sensors for the TensorStack T9k jobs (``batch.tensorstack.dev/v1beta1``): one per training-job kind and a
generic :class:`T9kJobSensor` for the others by ``kind``."""

from __future__ import annotations

from airflow_provider_training.sensors.training import TrainingJobSensor

T9K = "batch.tensorstack.dev/v1beta1"


class T9kJobSensor(TrainingJobSensor):
    """Wait for any T9k job, e.g. ``kind="GenericJob"``; ``kind="MPIJob"`` is T9k's (see
    :class:`TrainingJobSensor`). A paused job keeps it waiting."""

    job_api_version = T9K


class T9kTensorFlowTrainingJobSensor(T9kJobSensor):
    """Wait for a T9k TensorFlowTrainingJob."""

    job_kind = "TensorFlowTrainingJob"


class T9kPyTorchTrainingJobSensor(T9kJobSensor):
    """Wait for a T9k PyTorchTrainingJob."""

    job_kind = "PyTorchTrainingJob"


class T9kXGBoostTrainingJobSensor(T9kJobSensor):
    """Wait for a T9k XGBoostTrainingJob."""

    job_kind = "XGBoostTrainingJob"
