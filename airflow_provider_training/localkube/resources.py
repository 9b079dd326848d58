"""The resource types localkube serves: built-in Kubernetes kinds and every training-job custom resource."""

from __future__ import annotations

from dataclasses import dataclass

STATUS_ONLY: frozenset[str] = frozenset({"status"})


@dataclass(frozen=True)
class ResourceType:
    """One served resource, as discovery describes it (`/apis/{group}/{version}`)."""

    group: str
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool = True
    subresources: frozenset[str] = STATUS_ONLY
    builtin: bool = False
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """`v1` for the core group, `group/version` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """The qualified resource name the real server uses in messages: `pods`, `jobs.batch`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """`Pod`, `Job.batch`, `PyTorchJob.kubeflow.org`: how 422 messages name the kind."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


PODS = ResourceType(
    "",
    "v1",
    "pods",
    "Pod",
    "pod",
    subresources=frozenset({"status", "log"}),
    builtin=True,
    short_names=("po",),
)
SERVICES = ResourceType("", "v1", "services", "Service", "service", builtin=True, short_names=("svc",))
EVENTS = ResourceType(
    "", "v1", "events", "Event", "event", subresources=frozenset(), builtin=True, short_names=("ev",)
)
CONFIGMAPS = ResourceType(
    "",
    "v1",
    "configmaps",
    "ConfigMap",
    "configmap",
    subresources=frozenset(),
    builtin=True,
    short_names=("cm",),
)
BATCH_JOBS = ResourceType("batch", "v1", "jobs", "Job", "job", builtin=True)
REPLICASETS = ResourceType(
    "apps", "v1", "replicasets", "ReplicaSet", "replicaset", builtin=True, short_names=("rs",)
)

BUILTIN_TYPES: tuple[ResourceType, ...] = (PODS, SERVICES, EVENTS, CONFIGMAPS, BATCH_JOBS, REPLICASETS)


def _custom(
    group: str,
    version: str,
    kind: str,
    plural: str | None = None,
    *,
    status: bool = True,
    short: tuple[str, ...] = (),
) -> ResourceType:
    plural = plural or kind.lower() + "s"
    return ResourceType(
        group,
        version,
        plural,
        kind,
        kind.lower(),
        subresources=STATUS_ONLY if status else frozenset(),
        short_names=short,
    )


# Kubeflow Training Operator v1 (every CRD has the status subresource).
KUBEFLOW_V1: tuple[ResourceType, ...] = tuple(
    _custom("kubeflow.org", "v1", kind)
    for kind in ("TFJob", "PyTorchJob", "MXJob", "XGBoostJob", "PaddleJob", "MPIJob", "JAXJob")
)
# Legacy operators predate the status subresource: they write status with a PUT of the whole object.
LEGACY: tuple[ResourceType, ...] = (
    _custom("paddlepaddle.org", "v1", "TrainingJob", status=False, short=("tj",)),
    _custom("kubeflow.org", "v1alpha1", "MXJob", status=False),
    _custom("mxnet.mlkube.io", "v1beta1", "MxJob", status=False),
)
TENSORSTACK: tuple[ResourceType, ...] = tuple(
    _custom("batch.tensorstack.dev", "v1beta1", kind, short=(short,))
    for kind, short in (
        ("TensorFlowTrainingJob", "tj"),
        ("PyTorchTrainingJob", "pj"),
        ("XGBoostTrainingJob", "xj"),
        ("DeepSpeedJob", "dj"),
        ("ColossalAIJob", "caij"),
        ("MPIJob", "mj"),
        ("GenericJob", "gj"),
        ("BeamJob", "bj"),
    )
)
CUSTOM_TYPES: tuple[ResourceType, ...] = KUBEFLOW_V1 + LEGACY + TENSORSTACK


def default_resource_types() -> list[ResourceType]:
    """Built-ins plus every custom kind of every API family the provider supports."""
    return [*BUILTIN_TYPES, *CUSTOM_TYPES]
