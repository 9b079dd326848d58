"""Operators for the two legacy MXNet operators' kinds; each only fixes the kind.

Not Kubeflow's ``kubeflow.org/v1`` MXJob (:class:`~airflow_provider_training.operators.MXJobOperator`).
"""

from __future__ import annotations

from airflow_provider_training.operators.training import TrainingJobOperator

KUBEFLOW_V1ALPHA1 = "kubeflow.org/v1alpha1"
MLKUBE = "mxnet.mlkube.io/v1beta1"


class MXJobV1Alpha1Operator(TrainingJobOperator):
    """Submit a legacy ``kubeflow.org/v1alpha1`` MXJob (kubeflow/mxnet-operator) and wait for it; its
    ``terminationPolicy.chief`` replica decides the outcome (see :class:`TrainingJobOperator`)."""

    job_kind, job_api_version = "MXJob", KUBEFLOW_V1ALPHA1


class MlkubeMxJobOperator(TrainingJobOperator):
    """Submit a ``mxnet.mlkube.io/v1beta1`` MxJob (deepinsight/mxnet-operator) and wait for it; the
    SCHEDULER (dist) or WORKER (local) replica decides the outcome (see :class:`TrainingJobOperator`)."""

    job_kind, job_api_version = "MxJob", MLKUBE
