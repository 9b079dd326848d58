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
from airflow_provider_training.sensors.mpi_operator import MPIJobV2Beta1Sensor
from airflow_provider_training.sensors.mxnet_legacy import MlkubeMxJobSensor, MXJobV1Alpha1Sensor
from airflow_provider_training.sensors.paddle_edl import PaddleEDLTrainingJobSensor
from airflow_provider_training.sensors.tensorstack import (
    T9kJobSensor,
    T9kPyTorchTrainingJobSensor,
    T9kTensorFlowTrainingJobSensor,
    T9kXGBoostTrainingJobSensor,
)
from airflow_provider_training.sensors.trainer import TrainJobSensor
from airflow_provider_training.sensors.training import TrainingJobSensor

__all__ = [
    "JAXJobSensor",
    "MPIJobSensor",
    "MPIJobV2Beta1Sensor",
    "MXJobSensor",
    "MXJobV1Alpha1Sensor",
    "MlkubeMxJobSensor",
    "PaddleEDLTrainingJobSensor",
    "PaddleJobSensor",
    "PyTorchJobSensor",
    "T9kJobSensor",
    "T9kPyTorchTrainingJobSensor",
    "T9kTensorFlowTrainingJobSensor",
    "T9kXGBoostTrainingJobSensor",
    "TFJobSensor",
    "TrainJobSensor",
    "TrainingJobSensor",
    "XGBoostJobSensor",
]
