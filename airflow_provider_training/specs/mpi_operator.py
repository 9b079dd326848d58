"""Spec model of the MPI Operator's ``kubeflow.org/v2beta1`` MPIJob, with its controller's validation.

The controller validates a job after defaulting it (``pkg/apis/kubeflow/validation/validation.go``) and
refuses a bad one with a Warning event only (no condition), so the rules are checked here before submit:
Launcher required with exactly 1 replica; a Worker written needs at least 1 (its default, 0, is refused);
``restartPolicy`` ``Never`` or ``OnFailure``; ``<name>-worker-<n-1>`` a DNS label. No container name is
required (the operator uses each template's first container).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from airflow_provider_training.kinds.mpi_operator import LAUNCHER, VERSION, WORKER
from airflow_provider_training.specs.common import JobModel, Replica, RunPolicy, count_errors
from airflow_provider_training.specs.errors import FieldErrors
from airflow_provider_training.specs.kubeflow import KubeflowJob, KubeflowSpec, ReplicaSpecs

MPI_OPERATOR = "kubeflow.org/mpi-operator"


class MPIRunPolicy(RunPolicy):
    """The v1 run policy; ``managedBy`` names the MPI Operator instead of the Training Operator."""

    managed_by: Literal["kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue"] | None = Field(  # type: ignore[assignment]
        None, alias="managedBy"
    )


class MPIJobV2Beta1Spec(KubeflowSpec):
    run_policy: MPIRunPolicy | None = Field(None, alias="runPolicy")
    replica_specs: ReplicaSpecs = Field(alias="mpiReplicaSpecs")
    slots_per_worker: int | None = Field(None, alias="slotsPerWorker", ge=1)
    run_launcher_as_worker: bool | None = Field(None, alias="runLauncherAsWorker")
    ssh_auth_mount_path: str | None = Field(None, alias="sshAuthMountPath", min_length=1)
    launcher_creation_policy: Literal["AtStartup", "WaitForWorkersReady"] | None = Field(
        None, alias="launcherCreationPolicy"
    )
    mpi_implementation: Literal["OpenMPI", "Intel", "MPICH"] | None = Field(None, alias="mpiImplementation")


class MPIJobV2Beta1(KubeflowJob):
    """MPIJob of the standalone MPI Operator (``kubeflow.org/v2beta1``)."""

    API_VERSION: ClassVar[str] = f"kubeflow.org/{VERSION}"
    KIND: ClassVar[str] = "MPIJob"
    UNINDEXED: ClassVar[tuple[str, ...]] = (LAUNCHER,)  # the launcher Job <name>-launcher
    spec: MPIJobV2Beta1Spec

    def default_container_required(self, replica: Replica) -> str | None:
        return None

    def rule_errors(self) -> FieldErrors:
        key = f"spec.{self.job_kind().replica_spec_key}"
        errors: FieldErrors = [
            (f"{key}.{type_}.restartPolicy", f"must be Never or OnFailure (got {spec.restart_policy})")
            for type_, spec in self.spec.replica_specs.items()
            if spec.restart_policy not in (None, "Never", "OnFailure")
        ]
        launcher, worker = self.replica(LAUNCHER), self.replica(WORKER)
        errors += count_errors(launcher, exactly=1) if launcher else self.required_replica(LAUNCHER)
        if worker is not None and worker.replicas is None:
            unset = "must be at least 1 for Worker (got none: the operator's default, 0, is refused)"
            errors.append((f"{worker.path}.replicas", unset))
        elif worker is not None:
            errors += count_errors(worker, at_least=1)
        return errors


MODELS: tuple[type[JobModel], ...] = (MPIJobV2Beta1,)
