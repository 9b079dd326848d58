"""What a training-job kind is, the normalized status every kind is read into, and its failing replicas.

Nothing here does I/O. A kind module (``kubeflow.py``, ``paddle_edl.py``, ...) builds :class:`JobKind`
values; operators, sensors, triggers and hooks only ever talk to this interface.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

import pendulum

RawObject = Mapping[str, Any]
"""A Kubernetes object as the API returns it (a JSON dict)."""

ChildObjects = Mapping[str, list[RawObject]]
"""Child objects by resource key (see :class:`ChildResource.key`), for kinds whose status lives there."""


class JobState(enum.StrEnum):
    """The normalized lifecycle state of a training job."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED)


@dataclass(frozen=True, slots=True)
class ReplicaCounts:
    """Pod counts of one replica type."""

    desired: int | None = None
    active: int = 0
    succeeded: int = 0
    failed: int = 0

    def to_dict(self) -> dict[str, int | None]:
        return {
            "desired": self.desired,
            "active": self.active,
            "succeeded": self.succeeded,
            "failed": self.failed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplicaCounts:
        return cls(
            desired=data.get("desired"),
            active=int(data.get("active", 0)),
            succeeded=int(data.get("succeeded", 0)),
            failed=int(data.get("failed", 0)),
        )


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A training job's status, the same shape for every kind."""

    state: JobState
    reason: str = ""
    message: str = ""
    replicas: Mapping[str, ReplicaCounts] = field(default_factory=dict)
    start: datetime | None = None
    end: datetime | None = None
    # Set when the status could not be read from the object itself, e.g. "the operator is not running".
    stalled: bool = False
    # What the training itself reports (progress, metrics), for kinds whose status has it; JSON-ready,
    # ``None`` when the job reports nothing.
    progress: Mapping[str, Any] | None = None

    @property
    def duration_seconds(self) -> float | None:
        if self.start is None:
            return None
        end = self.end or pendulum.now("UTC")
        return max(0.0, (end - self.start).total_seconds())

    def desired_pods(self, types: Sequence[str] | None = None) -> int | None:
        """How many pods the status says are desired of replica ``types`` (case-insensitive; ``None``: all
        of them); ``None`` when that is not known: no replica counts, a type the counts do not name, or a
        count without its desired number. What tells a watcher that it has seen every replica pod."""
        if types is None:
            counts = list(self.replicas.values())
        else:
            by_lower = {name.lower(): found for name, found in self.replicas.items()}
            wanted = {name.lower() for name in types}
            if not wanted <= by_lower.keys():
                return None
            counts = [by_lower[name] for name in wanted]
        if not counts or any(c.desired is None for c in counts):
            return None
        return sum(c.desired or 0 for c in counts)

    def with_state(self, state: JobState, reason: str = "", message: str = "") -> JobStatus:
        return replace(self, state=state, reason=reason or self.reason, message=message or self.message)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form, for trigger events and XCom (``progress`` only when there is some)."""
        found = {
            "state": self.state.value,
            "reason": self.reason,
            "message": self.message,
            "replicas": {name: counts.to_dict() for name, counts in self.replicas.items()},
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "duration_seconds": self.duration_seconds,
            "stalled": self.stalled,
        }
        return found if self.progress is None else {**found, "progress": dict(self.progress)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobStatus:
        return cls(
            state=JobState(data["state"]),
            reason=data.get("reason", ""),
            message=data.get("message", ""),
            replicas={k: ReplicaCounts.from_dict(v) for k, v in (data.get("replicas") or {}).items()},
            start=parse_time(data.get("start")),
            end=parse_time(data.get("end")),
            stalled=bool(data.get("stalled", False)),
            progress=data.get("progress"),
        )


# The keys a replica failure's dict carries only when they say something.
_OPTIONAL_FAILURE_KEYS = ("source", "count", "log", "exit_code_unknown")


@dataclass
class ReplicaFailure:
    """One failing replica: where it ran, how it ended, and where that was read.

    Built by every reader of failures (``diagnostics.replica_failures`` and ``counted_failures`` from pods and
    the status, :attr:`JobKind.failed_replicas` from the job's status, :attr:`JobKind.failures_in_events` from
    its events); the waiter adds ``log`` and ``exit_code_unknown`` when it explains a failure.
    ``pod`` is ``None`` when only the status' count is known (then ``count`` says how many failed);
    ``source`` is ``"events"`` when read from the job's events; ``log`` says why no log line could be read;
    ``exit_code_unknown`` why the exit code could not be read.
    """

    replica_type: str
    pod: str | None = None
    index: int | None = None
    container: str | None = None
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    restarts: int = 0
    source: str | None = None
    count: int | None = None
    log: str | None = None
    exit_code_unknown: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form in a wait event's payload: the optional keys only when set."""
        found = {
            "pod": self.pod,
            "replica_type": self.replica_type,
            "index": self.index,
            "container": self.container,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "message": self.message,
            "restarts": self.restarts,
        }
        optional = {key: getattr(self, key) for key in _OPTIONAL_FAILURE_KEYS}
        return found | {key: value for key, value in optional.items() if value is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplicaFailure:
        """From :meth:`to_dict`'s output in a payload, also of an earlier version (missing keys: defaults)."""
        return cls(
            replica_type=str(data.get("replica_type", "")),
            pod=data.get("pod"),
            index=data.get("index"),
            container=data.get("container"),
            exit_code=data.get("exit_code"),
            reason=str(data.get("reason") or ""),
            message=str(data.get("message") or ""),
            restarts=int(data.get("restarts") or 0),
            **{key: data[key] for key in _OPTIONAL_FAILURE_KEYS if data.get(key) is not None},
        )

    @property
    def where(self) -> str:
        """``worker-1``, or the replica type alone when the index is unknown."""
        return self.replica_type if self.index is None else f"{self.replica_type.lower()}-{self.index}"


@dataclass(frozen=True)
class ResourceRef:
    """Where a Kubernetes resource lives in the API."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """``plural.group`` as kubectl names it: ``pytorchjobs.kubeflow.org``, ``pods``, ``jobs.batch``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


PODS = ResourceRef("", "v1", "pods", "Pod")
EVENTS = ResourceRef("", "v1", "events", "Event")
SERVICES = ResourceRef("", "v1", "services", "Service")
CONFIGMAPS = ResourceRef("", "v1", "configmaps", "ConfigMap")
BATCH_JOBS = ResourceRef("batch", "v1", "jobs", "Job")
REPLICASETS = ResourceRef("apps", "v1", "replicasets", "ReplicaSet")


@dataclass(frozen=True)
class ChildResource:
    """Objects a job's controller creates that the provider must read or clean up.

    ``selector`` turns a job name into a label selector finding these children.
    ``name``, when set, turns a job name into the one child's exact object name: generic code then finds it
    by name (GET, ``metadata.name`` field selector, a named watch subscription) instead of by ``selector``,
    for controllers that label nothing (the API server's defaulting may still label it; ``selector`` relies
    on that).
    Several entries may share one ``resource``; :attr:`JobKind.read_status` gets them merged under its key.
    ``needed_for_status`` children are handed to :attr:`JobKind.read_status`.
    ``delete_on_cleanup`` children are deleted with the job, for APIs whose controller never
    garbage-collects them.
    """

    resource: ResourceRef
    selector: Callable[[str], str]
    needed_for_status: bool = False
    delete_on_cleanup: bool = False
    name: Callable[[str], str] | None = None


@dataclass(frozen=True)
class ReplicaPod:
    """One replica pod, as a kind identifies it."""

    replica_type: str
    index: int | None
    name: str


class StatusReader(Protocol):
    """``read_status(job, children)``; ``grace_seconds`` is how long an empty status counts as not yet
    written before the result is ``stalled`` (every family reader takes it; the default is the kind's), as
    of ``now`` on the API server's clock (``None``: this machine's)."""

    def __call__(
        self,
        job: RawObject,
        children: ChildObjects,
        /,
        *,
        grace_seconds: float = ...,
        now: datetime | None = None,
    ) -> JobStatus: ...


@dataclass(frozen=True)
class JobKind:
    """Everything generic code needs to know about one training-job kind.

    ``read_status(job, children)`` is pure: the raw custom resource plus the children listed with
    ``needed_for_status`` become a :class:`JobStatus`. ``pod_selector(job_name)`` finds every replica pod;
    ``master_selector(job_name)`` finds the pod(s) whose logs matter most. ``replica_of_pod(pod)`` names a
    pod's replica type and index, for log prefixes and the replica table.

    ``extra_pod_selectors(job_name)`` lists more selectors whose pods are replicas too, for APIs whose replica
    types carry different labels (EDL's master and pserver pods): "all replicas" is the union.
    ``owns_pod(job_name, pod)`` filters pods a selector cannot tell apart (legacy MxJob pods carry no job
    name); generic code drops pods for which it is false. ``failed_replicas(job)`` lists the failing replicas
    the job's own status records (T9k keeps exit codes there even after its pods are gone), as
    :class:`ReplicaFailure` values like ``diagnostics.replica_failures``. ``failures_in_events(job_name,
    events)`` reads the same from the job's own events (the Kubeflow operator records each replica's exit code
    there, which outlives pods deleted by ``cleanPodPolicy``). ``suspend_patch(suspend)`` is the merge patch
    that suspends (``True``) or resumes (``False``) a job of this kind, ``None`` for kinds that cannot be
    suspended.

    ``pod_watch_selectors`` are label selectors without a job name that the watch hub sends the server, so
    that it lists and caches the pods of this kind's jobs and not every pod of the namespace: between them
    they must hold every pod the kind's pod selectors (and its children on pods) select, each selector within
    one of them (a selector none holds is served by a watch of the whole namespace). Several are for replica
    types labelled by different keys (a server-side selector cannot say "this label or that one"); each is
    one shared watch. Empty: the whole namespace.
    """

    resource: ResourceRef
    family: str
    replica_types: tuple[str, ...]
    default_container: str
    read_status: StatusReader
    pod_selector: Callable[[str], str]
    master_selector: Callable[[str], str]
    replica_of_pod: Callable[[RawObject], ReplicaPod]
    replica_spec_key: str | None = None
    children: tuple[ChildResource, ...] = ()
    # Refuses a target state this job can never reach (T9k debug mode never succeeds); returns an error text.
    check_target: Callable[[RawObject, JobState], str | None] = lambda job, target: None
    extra_pod_selectors: Callable[[str], tuple[str, ...]] = lambda job_name: ()
    owns_pod: Callable[[str, RawObject], bool] = lambda job_name, pod: True
    failed_replicas: Callable[[RawObject], list[ReplicaFailure]] = lambda job: []
    failures_in_events: Callable[[str, Sequence[RawObject]], list[ReplicaFailure]] = lambda name, events: []
    suspend_patch: Callable[[bool], dict[str, Any] | None] = lambda suspend: None
    deciding_replicas: tuple[str, ...] = ()
    pod_watch_selectors: tuple[str, ...] = ()
    # How the provider's deletes (cleanup, on_kill, timeout) propagate: Foreground keeps the job until its
    # children are gone; a kind whose controller recreates children of a job being deleted deletes Background.
    delete_propagation: str = "Foreground"

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def api_version(self) -> str:
        return self.resource.api_version

    @property
    def status_needs_children(self) -> bool:
        """Whether :attr:`read_status` derives the status from child objects (the job's own has none)."""
        return any(child.needed_for_status for child in self.children)

    def status(
        self,
        job: RawObject,
        children: ChildObjects | None = None,
        *,
        grace_seconds: float | None = None,
        now: datetime | None = None,
    ) -> JobStatus:
        """:attr:`read_status`, with the no-status grace period given (``None``: the kind's default), as of
        ``now`` on the API server's clock (``None``: this machine's; see ``server_clock.ServerClock``).

        A failed job has no active replicas: those its status still counts as active (its operator stopped
        updating the counts when the job failed, and deleted or abandoned the pods) count as failed, the way
        the Kubeflow operator counts a running pod being deleted.
        """
        given: dict[str, Any] = {"grace_seconds": grace_seconds, "now": now}
        status = self.read_status(job, children or {}, **{k: v for k, v in given.items() if v is not None})
        if status.state != JobState.FAILED or not any(c.active for c in status.replicas.values()):
            return status
        settled = {t: replace(c, active=0, failed=c.failed + c.active) for t, c in status.replicas.items()}
        return replace(status, replicas=settled)

    def deciding_replica(self, job: RawObject) -> str | None:
        """The replica type that decides ``job``'s outcome: the first of :attr:`deciding_replicas` it has
        (case-insensitive, with at least one replica), else its first replica type. Without replica counts:
        the only one of :attr:`deciding_replicas` (EDL's counts live in its children), or ``None`` while
        several could (a TrainJob's runtime may have a launcher, which its status shows only once its JobSet
        reports it)."""
        desired = self.status(job).replicas
        present = [name for name, counts in desired.items() if counts.desired != 0]
        by_lower = {name.lower(): name for name in present}
        for wanted in self.deciding_replicas:
            if wanted.lower() in by_lower:
                return by_lower[wanted.lower()]
        if present:
            return present[0]
        return self.deciding_replicas[0] if len(self.deciding_replicas) == 1 else None


def parse_time(value: Any) -> datetime | None:
    """Parse an RFC 3339 timestamp (or pass a datetime through); ``None`` for empty values."""
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value
    parsed = pendulum.parse(str(value))
    assert isinstance(parsed, datetime)
    return parsed
