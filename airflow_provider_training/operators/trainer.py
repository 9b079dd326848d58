"""The Kubeflow Trainer v2 ``TrainJob`` operator (``trainer.kubeflow.org/v1alpha1``).

Suspend and resume it with the generic
:class:`~airflow_provider_training.operators.TrainingJobSuspendOperator` and
:class:`~airflow_provider_training.operators.TrainingJobResumeOperator` (``kind="TrainJob"``): they send its
``spec.suspend``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_provider_training.operators.training import TrainingJobOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_training.hooks.training import TrainingJobHook

TRAINER = "trainer.kubeflow.org/v1alpha1"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")


class TrainingRuntimeNotFound(AirflowException):
    """The TrainJob's runtime does not exist: nothing was submitted."""


class TrainJobOperator(TrainingJobOperator):
    """Submit a Kubeflow Trainer v2 TrainJob and wait for it (see :class:`TrainingJobOperator`).

    Either ``job`` (a whole TrainJob manifest) or ``runtime`` with the overrides below, from which the
    manifest is built. Before anything is sent, the referenced runtime is read: a missing one fails the task
    with a message naming it, and no TrainJob is created (the Trainer controller would only fail it later).

    :param runtime: the TrainingRuntime or ClusterTrainingRuntime's name (``runtimeRef.name``).
    :param runtime_kind: ``"ClusterTrainingRuntime"`` (default, cluster-wide) or ``"TrainingRuntime"`` (in
        the job's namespace).
    :param trainer: ``spec.trainer``: ``image``, ``command``, ``args``, ``env``, ``numNodes``,
        ``resourcesPerNode``, ``numProcPerNode``. :param initializer: ``spec.initializer`` (``dataset``,
        ``model``). :param spec: more ``spec`` fields (``activeDeadlineSeconds``, ``runtimePatches``, ...).
    """

    job_kind, job_api_version = "TrainJob", TRAINER

    def __init__(
        self,
        *,
        job: Any = None,
        runtime: str | None = None,
        runtime_kind: str = "ClusterTrainingRuntime",
        trainer: Mapping[str, Any] | None = None,
        initializer: Mapping[str, Any] | None = None,
        spec: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        built = runtime is not None or trainer is not None or initializer is not None or spec is not None
        if job is not None and built:
            raise ValueError("pass either job or runtime (with trainer, initializer, spec), not both")
        if job is None and runtime is None:
            raise ValueError("runtime is required (the runtime's name), or pass a whole TrainJob as job")
        if runtime_kind not in RUNTIME_KINDS:
            raise ValueError(f"runtime_kind must be one of {', '.join(RUNTIME_KINDS)} (got {runtime_kind!r})")
        if job is None:
            job = train_job_manifest(str(runtime), runtime_kind, trainer, initializer, spec)
        super().__init__(job=job, **kwargs)

    def execute(self, context: Context) -> Any:
        from airflow_provider_training.kinds.registry import get_kind
        from airflow_provider_training.specs import load_job

        self._check_rendered()
        manifest = load_job(self.job, kind=get_kind(str(self.kind), self.api_version))
        namespace = self.namespace or (manifest.get("metadata") or {}).get("namespace")
        with self._hook() as hook:
            check_runtime(hook, manifest["spec"]["runtimeRef"], namespace or hook.get_namespace())
        return super().execute(context)


def train_job_manifest(
    runtime: str,
    runtime_kind: str,
    trainer: Mapping[str, Any] | None,
    initializer: Mapping[str, Any] | None,
    spec: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """A TrainJob manifest (validated in ``execute``, before anything is sent)."""
    body: dict[str, Any] = {**(spec or {}), "runtimeRef": {"name": runtime, "kind": runtime_kind}}
    if trainer is not None:
        body["trainer"] = dict(trainer)
    if initializer is not None:
        body["initializer"] = dict(initializer)
    return {"apiVersion": TRAINER, "kind": "TrainJob", "metadata": {}, "spec": body}


def check_runtime(hook: TrainingJobHook, runtime_ref: Mapping[str, Any], namespace: str) -> None:
    """Raise :class:`TrainingRuntimeNotFound` unless the runtime exists (a namespaced TrainingRuntime in
    ``namespace``, a ClusterTrainingRuntime cluster-wide)."""
    from airflow_provider_training.kinds.trainer import CLUSTER_TRAINING_RUNTIMES, TRAINING_RUNTIMES

    name, kind = str(runtime_ref["name"]), str(runtime_ref.get("kind") or "ClusterTrainingRuntime")
    if kind == "TrainingRuntime":
        found, where = hook.get_object(TRAINING_RUNTIMES, name, namespace), f"in namespace {namespace}"
    else:
        found, where = hook.get_object(CLUSTER_TRAINING_RUNTIMES, name, ""), "in the cluster"
    if found is None:
        raise TrainingRuntimeNotFound(
            f"the TrainJob's runtime {kind} {name!r} does not exist {where}: nothing was submitted. Install "
            f"it (e.g. kubectl get {kind.lower()}s), or name an existing one in runtimeRef"
        )
