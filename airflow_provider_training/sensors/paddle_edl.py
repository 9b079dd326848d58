"""The PaddlePaddle EDL ``TrainingJob`` sensor (``paddlepaddle.org/v1``); only fixes the kind."""

from __future__ import annotations

from airflow_provider_training.sensors.training import TrainingJobSensor


class PaddleEDLTrainingJobSensor(TrainingJobSensor):
    """Wait for a PaddlePaddle EDL TrainingJob, read from its trainer Job and pods (see
    :class:`TrainingJobSensor`); not Kubeflow's PaddleJob."""

    job_kind, job_api_version = "TrainingJob", "paddlepaddle.org/v1"
