"""Sensors that wait for existing training jobs; importing this module stays cheap (no clients)."""

from __future__ import annotations

from airflow_provider_training.sensors.kubeflow import (
    JAXJobSensor,
    MPIJobSensor,
    MXJobSensor,
    PaddleJobSensor,
    PyTorchJobSensor,
    TFJobSensor,
    XGBoostJobSensor,
)
from airflow_provider_training.sensors.training import TrainingJobSensor

__all__ = [
    "JAXJobSensor",
    "MPIJobSensor",
    "MXJobSensor",
    "PaddleJobSensor",
    "PyTorchJobSensor",
    "TFJobSensor",
    "TrainingJobSensor",
    "XGBoostJobSensor",
]
