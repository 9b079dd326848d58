"""The Kubeflow Trainer v2 ``TrainJob`` sensor (``trainer.kubeflow.org/v1alpha1``)."""

from __future__ import annotations

from airflow_provider_training.sensors.training import TrainingJobSensor


class TrainJobSensor(TrainingJobSensor):
    """Wait for a Kubeflow Trainer v2 TrainJob (see :class:`TrainingJobSensor`). A suspended TrainJob keeps
    it waiting; one whose runtime or JobSet could not be created fails it with the controller's reason."""

    job_kind, job_api_version = "TrainJob", "trainer.kubeflow.org/v1alpha1"
