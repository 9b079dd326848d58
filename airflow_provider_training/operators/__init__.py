"""Operators that submit training jobs and wait for them; importing this module stays cheap (no clients)."""

from __future__ import annotations

from airflow_provider_training.operators.kubeflow import (
    JAXJobOperator,
    MPIJobOperator,
    MXJobOperator,
    PaddleJobOperator,
    PyTorchJobOperator,
    TFJobOperator,
    XGBoostJobOperator,
)
from airflow_provider_training.operators.training import TrainingJobOperator

__all__ = [
    "JAXJobOperator",
    "MPIJobOperator",
    "MXJobOperator",
    "PaddleJobOperator",
    "PyTorchJobOperator",
    "TFJobOperator",
    "TrainingJobOperator",
    "XGBoostJobOperator",
]
