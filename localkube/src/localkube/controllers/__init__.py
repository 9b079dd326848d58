"""Emulated training-job operators: each runs on the cluster's loop and reconciles on store events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from localkube.cluster import LocalKube


class Controller(Protocol):
    async def run(self, cluster: LocalKube) -> None:
        """Long-running: reconcile on store events until cancelled."""


def default_controllers() -> list[Controller]:
    """Every controller a default localkube runs: the Kubeflow Training Operator v1 kinds, the legacy APIs
    (EDL, both legacy MXNet operators, T9k training jobs, GenericJob, DeepSpeedJob, MPIJob and
    ColossalAIJob) and the batch Job / ReplicaSet controllers EDL and mlkube need."""
    from localkube.controllers.builtin import (
        BatchJobController,
        ReplicaSetController,
    )
    from localkube.controllers.kubeflow import KubeflowController
    from localkube.controllers.mxnet_legacy import LegacyMxnetController
    from localkube.controllers.paddle_edl import PaddleEdlController
    from localkube.controllers.tensorstack import TensorStackController
    from localkube.controllers.tensorstack_generic import GenericJobController
    from localkube.controllers.tensorstack_siblings import SiblingController

    return [
        KubeflowController(),
        BatchJobController(),
        ReplicaSetController(),
        PaddleEdlController(),
        LegacyMxnetController(),
        TensorStackController(),
        GenericJobController(),
        SiblingController(),
    ]
