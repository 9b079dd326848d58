"""One operator per Kubeflow Training Operator ``kubeflow.org/v1`` kind; each only fixes the kind."""

from __future__ import annotations

from airflow_provider_training.operators.training import TrainingJobOperator

KUBEFLOW_V1 = "kubeflow.org/v1"


class TFJobOperator(TrainingJobOperator):
    """Submit a Kubeflow TFJob and wait for it (see :class:`TrainingJobOperator`)."""

    job_kind, job_api_version = "TFJob", KUBEFLOW_V1


class PyTorchJobOperator(TrainingJobOperator):
    """Submit a Kubeflow PyTorchJob and wait for it (see :class:`TrainingJobOperator`)."""

    job_kind, job_api_version = "PyTorchJob", KUBEFLOW_V1


class MXJobOperator(TrainingJobOperator):
    """Submit a Kubeflow MXJob (Training Operator <= 1.8) and wait (see :class:`TrainingJobOperator`)."""

    job_kind, job_api_version = "MXJob", KUBEFLOW_V1


class XGBoostJobOperator(TrainingJobOperator):
    """Submit a Kubeflow XGBoostJob and wait for it (see :class:`TrainingJobOperator`)."""

    job_kind, job_api_version = "XGBoostJob", KUBEFLOW_V1


class PaddleJobOperator(TrainingJobOperator):
    """Submit a Kubeflow PaddleJob and wait for it (see :class:`TrainingJobOperator`)."""

    job_kind, job_api_version = "PaddleJob", KUBEFLOW_V1


class MPIJobOperator(TrainingJobOperator):
    """Submit a Kubeflow MPIJob (``kubeflow.org/v1``) and wait for it (see :class:`TrainingJobOperator`)."""

    job_kind, job_api_version = "MPIJob", KUBEFLOW_V1


class JAXJobOperator(TrainingJobOperator):
    """Submit a Kubeflow JAXJob (Training Operator >= 1.9) and wait (see :class:`TrainingJobOperator`)."""

    job_kind, job_api_version = "JAXJob", KUBEFLOW_V1
