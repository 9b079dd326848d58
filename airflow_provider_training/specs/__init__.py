"""Job specs: pydantic models per kind, ``load_job`` (dict / YAML text / YAML file / model -> validated
manifest) and builders for the common case. Imports pydantic: operators import this lazily.
"""

from __future__ import annotations

from airflow_provider_training.specs.builders import (
    JobOptions,
    build_job,
    jax_job,
    mpi_job,
    mx_job,
    paddle_job,
    pytorch_job,
    tf_job,
    xgboost_job,
)
from airflow_provider_training.specs.common import (
    JobModel,
    ObjectMeta,
    Replica,
    ReplicaSpec,
    RunPolicy,
    SchedulingPolicy,
    SpecModel,
)
from airflow_provider_training.specs.errors import SpecError
from airflow_provider_training.specs.kubeflow import (
    ElasticPolicy,
    JAXJob,
    MPIJob,
    MXJob,
    PaddleJob,
    PyTorchElasticPolicy,
    PyTorchJob,
    TFJob,
    XGBoostJob,
)
from airflow_provider_training.specs.loader import job_name_limit, load_job, model_for, parse_job

__all__ = [
    "ElasticPolicy",
    "JAXJob",
    "JobModel",
    "JobOptions",
    "MPIJob",
    "MXJob",
    "ObjectMeta",
    "PaddleJob",
    "PyTorchElasticPolicy",
    "PyTorchJob",
    "Replica",
    "ReplicaSpec",
    "RunPolicy",
    "SchedulingPolicy",
    "SpecError",
    "SpecModel",
    "TFJob",
    "XGBoostJob",
    "build_job",
    "jax_job",
    "job_name_limit",
    "load_job",
    "model_for",
    "mpi_job",
    "mx_job",
    "paddle_job",
    "parse_job",
    "pytorch_job",
    "tf_job",
    "xgboost_job",
]
