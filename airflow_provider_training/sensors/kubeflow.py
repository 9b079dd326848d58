"""One sensor per Kubeflow Training Operator ``kubeflow.org/v1`` kind; each only fixes the kind."""

from __future__ import annotations

from airflow_provider_training.sensors.training import TrainingJobSensor

KUBEFLOW_V1 = "kubeflow.org/v1"


class TFJobSensor(TrainingJobSensor):
    """Wait for a Kubeflow TFJob (see :class:`TrainingJobSensor`)."""

    job_kind, job_api_version = "TFJob", KUBEFLOW_V1


class PyTorchJobSensor(TrainingJobSensor):
    """Wait for a Kubeflow PyTorchJob (see :class:`TrainingJobSensor`)."""

    job_kind, job_api_version = "PyTorchJob", KUBEFLOW_V1


class MXJobSensor(TrainingJobSensor):
    """Wait for a Kubeflow MXJob (training-operator <= 1.8) (see :class:`TrainingJobSensor`)."""

    job_kind, job_api_version = "MXJob", KUBEFLOW_V1


class XGBoostJobSensor(TrainingJobSensor):
    """Wait for a Kubeflow XGBoostJob (see :class:`TrainingJobSensor`)."""

    job_kind, job_api_version = "XGBoostJob", KUBEFLOW_V1


class PaddleJobSensor(TrainingJobSensor):
    """Wait for a Kubeflow PaddleJob (see :class:`TrainingJobSensor`)."""

    job_kind, job_api_version = "PaddleJob", KUBEFLOW_V1


class MPIJobSensor(TrainingJobSensor):
    """Wait for a Kubeflow MPIJob (``kubeflow.org/v1``) (see :class:`TrainingJobSensor`)."""

    job_kind, job_api_version = "MPIJob", KUBEFLOW_V1


class JAXJobSensor(TrainingJobSensor):
    """Wait for a Kubeflow JAXJob (training-operator >= 1.9) (see :class:`TrainingJobSensor`)."""

    job_kind, job_api_version = "JAXJob", KUBEFLOW_V1
