"""Sensors for the two legacy MXNet operators' kinds; each only fixes the kind."""

from __future__ import annotations

from airflow_provider_training.sensors.training import TrainingJobSensor


class MXJobV1Alpha1Sensor(TrainingJobSensor):
    """Wait for a legacy ``kubeflow.org/v1alpha1`` MXJob (see :class:`TrainingJobSensor`)."""

    job_kind, job_api_version = "MXJob", "kubeflow.org/v1alpha1"


class MlkubeMxJobSensor(TrainingJobSensor):
    """Wait for a ``mxnet.mlkube.io/v1beta1`` MxJob (see :class:`TrainingJobSensor`)."""

    job_kind, job_api_version = "MxJob", "mxnet.mlkube.io/v1beta1"
