"""Operators that submit training jobs and wait for them; importing this module stays cheap (no clients)."""

from __future__ import annotations

from airflow_provider_training.operators.control import TrainingJobResumeOperator, TrainingJobSuspendOperator
from airflow_provider_training.operators.kubeflow import (
    JAXJobOperator,
    MPIJobOperator,
    MXJobOperator,
    PaddleJobOperator,
    PyTorchJobOperator,
    TFJobOperator,
    XGBoostJobOperator,
)
from airflow_provider_training.operators.mpi_operator import MPIJobV2Beta1Operator
from airflow_provider_training.operators.mxnet_legacy import MlkubeMxJobOperator, MXJobV1Alpha1Operator
from airflow_provider_training.operators.paddle_edl import PaddleEDLTrainingJobOperator
from airflow_provider_training.operators.tensorstack import (
    T9kJobOperator,
    T9kPauseJobOperator,
    T9kPyTorchTrainingJobOperator,
    T9kResumeJobOperator,
    T9kTensorFlowTrainingJobOperator,
    T9kXGBoostTrainingJobOperator,
)
from airflow_provider_training.operators.trainer import TrainJobOperator
from airflow_provider_training.operators.training import TrainingJobOperator

__all__ = [
    "JAXJobOperator",
    "MPIJobOperator",
    "MPIJobV2Beta1Operator",
    "MXJobOperator",
    "MXJobV1Alpha1Operator",
    "MlkubeMxJobOperator",
    "PaddleEDLTrainingJobOperator",
    "PaddleJobOperator",
    "PyTorchJobOperator",
    "T9kJobOperator",
    "T9kPauseJobOperator",
    "T9kPyTorchTrainingJobOperator",
    "T9kResumeJobOperator",
    "T9kTensorFlowTrainingJobOperator",
    "T9kXGBoostTrainingJobOperator",
    "TFJobOperator",
    "TrainJobOperator",
    "TrainingJobOperator",
    "TrainingJobResumeOperator",
    "TrainingJobSuspendOperator",
    "XGBoostJobOperator",
]
