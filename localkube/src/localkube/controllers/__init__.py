"""Emulated training-job operators: each runs on the cluster's loop and reconciles on store events."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from localkube.api import ClusterContext
    from localkube.resources import ResourceType


class Controller(Protocol):
    async def run(self, cluster: ClusterContext) -> None:
        """Long-running: reconcile on store events until cancelled."""


# The controllers by the names `localkube agent --controllers` takes, in the order a cluster starts them.
CONTROLLER_NAMES = (
    "kubeflow",
    "batch",
    "replicaset",
    "edl",
    "mxnet-legacy",
    "t9k",
    "mpi-operator",
    "jobset",
    "trainer",
    "gates",
)


def controllers_named(names: Iterable[str]) -> list[Controller]:
    """The controllers of these names (see `CONTROLLER_NAMES`); ValueError for an unknown name."""
    from localkube.controllers.builtin import BatchJobController, ReplicaSetController
    from localkube.controllers.gates import GateController
    from localkube.controllers.jobset import JobSetController
    from localkube.controllers.kubeflow import KubeflowController
    from localkube.controllers.mpi_operator import MpiOperatorController
    from localkube.controllers.mxnet_legacy import LegacyMxnetController
    from localkube.controllers.paddle_edl import PaddleEdlController
    from localkube.controllers.tensorstack import TensorStackController
    from localkube.controllers.tensorstack_generic import GenericJobController
    from localkube.controllers.tensorstack_siblings import SiblingController
    from localkube.controllers.trainer import TrainJobController

    factories: dict[str, list[type]] = {
        "kubeflow": [KubeflowController],
        "batch": [BatchJobController],
        "replicaset": [ReplicaSetController],
        "edl": [PaddleEdlController],
        "mxnet-legacy": [LegacyMxnetController],
        "t9k": [TensorStackController, GenericJobController, SiblingController],
        "mpi-operator": [MpiOperatorController],
        "jobset": [JobSetController],
        "trainer": [TrainJobController],
        "gates": [GateController],
    }
    wanted = _checked(names)
    return [factory() for name in CONTROLLER_NAMES if name in wanted for factory in factories[name]]


def custom_types_of(names: Iterable[str]) -> list[ResourceType]:
    """The custom resource types the named controllers reconcile (what an agent must watch for them)."""
    from localkube.controllers.jobset import JOBSETS
    from localkube.controllers.mpi_operator import MPIJOBS_V2BETA1
    from localkube.controllers.trainer import TRAINER_TYPES
    from localkube.resources import KUBEFLOW_V1, LEGACY, TENSORSTACK

    types = {
        "kubeflow": KUBEFLOW_V1,
        "edl": LEGACY[:1],
        "mxnet-legacy": LEGACY[1:],
        "t9k": TENSORSTACK,
        "mpi-operator": (MPIJOBS_V2BETA1,),
        "jobset": (JOBSETS,),
        "trainer": TRAINER_TYPES,
    }
    wanted = _checked(names)
    return [rt for name in CONTROLLER_NAMES if name in wanted for rt in types.get(name, ())]


def _checked(names: Iterable[str]) -> set[str]:
    wanted = set(names)
    if unknown := wanted - set(CONTROLLER_NAMES):
        raise ValueError(
            f"unknown controllers {sorted(unknown)}: expected some of {', '.join(CONTROLLER_NAMES)}"
        )
    return wanted


def default_controllers() -> list[Controller]:
    """Every controller a default localkube runs: the Kubeflow Training Operator v1 kinds, the legacy APIs
    (EDL, both legacy MXNet operators, T9k training jobs, GenericJob, DeepSpeedJob, MPIJob and
    ColossalAIJob), the MPI Operator's v2beta1 MPIJob, JobSet and Kubeflow Trainer v2's TrainJob (each when
    its CRDs are loaded) and the batch Job /
    ReplicaSet controllers EDL, mlkube and the MPI launcher need. Not ``gates``: in-process,
    tests open gates directly."""
    return controllers_named(name for name in CONTROLLER_NAMES if name != "gates")
