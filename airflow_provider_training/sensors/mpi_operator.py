"""The standalone MPI Operator's MPIJob sensor (``kubeflow.org/v2beta1``)."""

from __future__ import annotations

from airflow_provider_training.sensors.training import TrainingJobSensor


class MPIJobV2Beta1Sensor(TrainingJobSensor):
    """Wait for an MPI Operator MPIJob (``kubeflow.org/v2beta1``; see :class:`TrainingJobSensor`). The
    launcher decides its outcome; a suspended one keeps the sensor waiting."""

    job_kind, job_api_version = "MPIJob", "kubeflow.org/v2beta1"
