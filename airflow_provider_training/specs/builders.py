"""Manifests for the common case, for DAG files: one image, a command, a number of replicas per type.

Every builder returns the validated manifest dict (see :func:`load_job`); without ``name`` the operator names
the job. Every job gets ``runPolicy.backoffLimit`` (default :data:`DEFAULT_BACKOFF_LIMIT`) where its kind's
API has that field, so that a replica that restarts for ever fails the job. Kubernetes client objects
(``V1ResourceRequirements``, ``V1EnvVar``, ...) may be passed wherever a dict is expected.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypedDict, Unpack

from airflow_provider_training.kinds import JobKind, get_kind
from airflow_provider_training.params import DEFAULT_BACKOFF_LIMIT, DEFAULT_RESTART_POLICY
from airflow_provider_training.specs.loader import has_field, load_job, model_for

Command = Sequence[str] | str


class JobOptions(TypedDict, total=False):
    """Options every builder takes."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    resources: Any  # {"limits": {...}, "requests": {...}} or a V1ResourceRequirements
    env: Mapping[str, str] | Sequence[Any]  # {"NAME": "value"} or a list of env entries / V1EnvVar
    restart_policy: str  # Always | OnFailure | Never | ExitCode; unset: the operator's default for the kind
    # {"cleanPodPolicy": "None", "backoffLimit": 3, ...}; backoffLimit defaults to DEFAULT_BACKOFF_LIMIT
    run_policy: Mapping[str, Any]
    # more container fields: ports, volumeMounts, imagePullPolicy, workingDir, ...
    container: Mapping[str, Any]
    pod_spec: Mapping[str, Any]  # more pod spec fields: volumes, nodeSelector, tolerations, ...
    spec: Mapping[str, Any]  # more spec fields of the kind: successPolicy, elasticPolicy, ...


def build_job(
    kind: str | JobKind,
    image: str,
    command: Command | None = None,
    replicas: Mapping[str, int] | None = None,
    *,
    args: Command | None = None,
    command_types: Collection[str] | None = None,
    **options: Unpack[JobOptions],
) -> dict[str, Any]:
    """A job of ``kind`` whose replicas (default ``{"Worker": 2}``) run ``image`` in the kind's default
    container. ``command``/``args`` go to the replica types in ``command_types`` (default: all).
    """
    job_kind = kind if isinstance(kind, JobKind) else get_kind(kind)
    if job_kind.replica_spec_key is None:
        raise ValueError(f"{job_kind.kind} has no replica specs to build; write its manifest, use load_job()")
    replica_specs = {
        type_: _replica_spec(
            image,
            job_kind.default_container,
            count,
            command if command_types is None or type_ in command_types else None,
            args if command_types is None or type_ in command_types else None,
            options,
        )
        for type_, count in (replicas or {"Worker": 2}).items()
    }
    metadata = {
        key: value for key, value in options.items() if key in ("name", "namespace", "labels", "annotations")
    }
    packed = model_for(job_kind).pack_replica_specs(replica_specs)
    spec: dict[str, Any] = {**options.get("spec", {}), job_kind.replica_spec_key: packed}
    run_policy = dict(options["run_policy"] if "run_policy" in options else spec.get("runPolicy") or {})
    if has_field(job_kind, "spec.runPolicy.backoffLimit"):
        run_policy.setdefault("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    if run_policy:
        spec["runPolicy"] = run_policy
    manifest = {"apiVersion": job_kind.api_version, "kind": job_kind.kind, "metadata": metadata, "spec": spec}
    return load_job(manifest, kind=job_kind)


def _replica_spec(
    image: str,
    container_name: str,
    count: int,
    command: Command | None,
    args: Command | None,
    options: JobOptions,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": container_name, "image": image, **options.get("container", {})}
    if command:
        container["command"] = _argv(command)
    if args:
        container["args"] = _argv(args)
    if "resources" in options:
        container["resources"] = options["resources"]
    if "env" in options:
        env = options["env"]
        container["env"] = (
            [{"name": key, "value": str(value)} for key, value in env.items()]
            if isinstance(env, Mapping)
            else list(env)
        )
    spec: dict[str, Any] = {
        "replicas": count,
        "template": {"spec": {**options.get("pod_spec", {}), "containers": [container]}},
    }
    if "restart_policy" in options:
        spec["restartPolicy"] = options["restart_policy"]
    return spec


def _argv(value: Command) -> list[str]:
    """A list of arguments; a single string is one argument (no shell splitting)."""
    return [value] if isinstance(value, str) else list(value)


def _present(**counts: int) -> dict[str, int]:
    """Replica types with a count above zero."""
    return {type_: count for type_, count in counts.items() if count > 0}


def tf_job(
    *,
    image: str,
    command: Command | None = None,
    args: Command | None = None,
    workers: int = 2,
    ps: int = 0,
    chief: int = 0,
    evaluator: int = 0,
    **options: Unpack[JobOptions],
) -> dict[str, Any]:
    counts = _present(Chief=chief, PS=ps, Worker=workers, Evaluator=evaluator)
    return build_job("TFJob", image, command, counts, args=args, **options)


def pytorch_job(
    *,
    image: str,
    command: Command | None = None,
    args: Command | None = None,
    master: int = 1,
    workers: int = 2,
    nproc_per_node: str | int | None = None,
    **options: Unpack[JobOptions],
) -> dict[str, Any]:
    """A PyTorchJob; ``restart_policy`` defaults to Never, as ``@task.pytorch_job``'s (a failing replica fails
    the job at once; ``OnFailure`` restarts it within ``runPolicy.backoffLimit``); ``nproc_per_node`` is
    ``spec.nprocPerNode``."""
    options.setdefault("restart_policy", DEFAULT_RESTART_POLICY)
    if nproc_per_node is not None:
        options["spec"] = {**options.get("spec", {}), "nprocPerNode": str(nproc_per_node)}
    return build_job(
        "PyTorchJob", image, command, _present(Master=master, Worker=workers), args=args, **options
    )


def mx_job(
    *,
    image: str,
    command: Command | None = None,
    args: Command | None = None,
    scheduler: int = 1,
    server: int = 1,
    workers: int = 1,
    job_mode: str = "MXTrain",
    **options: Unpack[JobOptions],
) -> dict[str, Any]:
    options["spec"] = {**options.get("spec", {}), "jobMode": job_mode}
    counts = _present(Scheduler=scheduler, Server=server, Worker=workers)
    return build_job("MXJob", image, command, counts, args=args, **options)


def xgboost_job(
    *,
    image: str,
    command: Command | None = None,
    args: Command | None = None,
    workers: int = 2,
    **options: Unpack[JobOptions],
) -> dict[str, Any]:
    """An XGBoostJob: one Master (required by the operator) and ``workers`` Workers."""
    return build_job("XGBoostJob", image, command, _present(Master=1, Worker=workers), args=args, **options)


def paddle_job(
    *,
    image: str,
    command: Command | None = None,
    args: Command | None = None,
    master: int = 0,
    workers: int = 2,
    **options: Unpack[JobOptions],
) -> dict[str, Any]:
    """A PaddleJob: collective mode by default (``master=0``), parameter-server mode with ``master=1``."""
    return build_job(
        "PaddleJob", image, command, _present(Master=master, Worker=workers), args=args, **options
    )


def mpi_job(
    *,
    image: str,
    command: Command | None = None,
    args: Command | None = None,
    workers: int = 2,
    slots_per_worker: int | None = None,
    api_version: str = "kubeflow.org/v1",
    **options: Unpack[JobOptions],
) -> dict[str, Any]:
    """An MPIJob: the Launcher runs ``command`` (e.g. ``mpirun ...``); Workers wait for it.

    ``api_version="kubeflow.org/v2beta1"`` builds the standalone MPI Operator's MPIJob instead of the
    Training Operator's v1 one (a cluster serves one of the two; more v2beta1 fields, such as
    ``launcherCreationPolicy``, go in ``spec``)."""
    if slots_per_worker is not None:
        options["spec"] = {**options.get("spec", {}), "slotsPerWorker": slots_per_worker}
    replicas = {"Launcher": 1, "Worker": workers}
    kind = get_kind("MPIJob", api_version)
    return build_job(kind, image, command, replicas, args=args, command_types=("Launcher",), **options)


def jax_job(
    *,
    image: str,
    command: Command | None = None,
    args: Command | None = None,
    workers: int = 2,
    **options: Unpack[JobOptions],
) -> dict[str, Any]:
    return build_job("JAXJob", image, command, _present(Worker=workers), args=args, **options)
