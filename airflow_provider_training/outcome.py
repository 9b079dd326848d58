"""How a wait ended, typed: :class:`Outcome`, :class:`JobRef` and :class:`WaitEvent`, whose failing
replicas are :class:`~airflow_provider_training.kinds.base.ReplicaFailure` values (defined next to the kinds
that read them, re-exported here).

The waiter builds a :class:`WaitEvent`; it crosses the triggerer/worker boundary as its payload (plain JSON,
:meth:`WaitEvent.to_payload`), read back with :meth:`WaitEvent.from_payload`, which also reads payloads of
earlier versions (missing keys take their defaults). The payload's shape::

    {"status": "success" | "failed" | "timeout" | "deleted" | "error",
     "job": {"name", "namespace", "uid", "kind", "api_version"},
     "job_status": JobStatus.to_dict() as of the event, or None,
     "message": str,
     "pods": [pod names],
     "replica_failures": [{"pod", "replica_type", "index", "container", "exit_code", "reason", "message",
                           "restarts", optional "source": "events", "count" (status counts only),
                           "log" (why no log line could be read), "exit_code_unknown" (why)}],
     "log_tail": {pod: [last lines]},
     "events": [recent Warning events],
     "notes": [what could not be read, e.g. "the rest of master-0's log could not be read: ..."]}

Pure data, no I/O; cheap to import.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_training.kinds.base import JobKind, JobState, ReplicaFailure

__all__ = ["JobRef", "Outcome", "ReplicaFailure", "WaitEvent"]


class Outcome(enum.StrEnum):
    """How a wait ended: the job reached the target state, failed, ran out of time, was deleted, or the
    wait itself could not go on (``ERROR``: the job is not known to have failed)."""

    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"
    DELETED = "deleted"
    ERROR = "error"


@dataclass(frozen=True)
class JobRef:
    """Which job object: its name, namespace, uid (``None`` before it was read) and kind."""

    name: str
    namespace: str
    uid: str | None
    kind: str
    api_version: str

    @classmethod
    def of(cls, kind: JobKind, job: Mapping[str, Any]) -> JobRef:
        """The reference of a job object read from the API."""
        meta = job.get("metadata") or {}
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        return cls(name, namespace, meta.get("uid"), kind.kind, kind.api_version)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "kind": self.kind,
            "api_version": self.api_version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> JobRef | None:
        """``None`` for an empty or missing reference."""
        if not data:
            return None
        return cls(
            name=str(data.get("name", "")),
            namespace=str(data.get("namespace", "")),
            uid=data.get("uid"),
            kind=str(data.get("kind", "")),
            api_version=str(data.get("api_version", "")),
        )

    @property
    def label(self) -> str:
        """``PyTorchJob default/mnist``."""
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass
class WaitEvent:
    """Everything known when a wait ended; see the module docstring for its payload."""

    outcome: Outcome
    job: JobRef | None
    message: str = ""
    job_status: dict[str, Any] | None = None  # JobStatus.to_dict() as of the event (its duration then)
    pods: list[str] = field(default_factory=list)
    replica_failures: list[ReplicaFailure] = field(default_factory=list)
    log_tail: dict[str, list[str]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.outcome is Outcome.SUCCESS

    @property
    def state(self) -> JobState | None:
        """The job's state as of the event, if it was read."""
        return JobState((self.job_status or {})["state"]) if self.job_status else None

    def to_payload(self) -> dict[str, Any]:
        """The JSON payload (trigger event, ``TrainingJobError.event``)."""
        return {
            "status": self.outcome.value,
            "job": self.job.to_dict() if self.job else None,
            "job_status": self.job_status,
            "message": self.message,
            "pods": list(self.pods),
            "replica_failures": [failure.to_dict() for failure in self.replica_failures],
            "log_tail": {pod: list(lines) for pod, lines in self.log_tail.items()},
            "events": list(self.events),
            "notes": list(self.notes),
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> WaitEvent:
        """From :meth:`to_payload`'s output, or an earlier version's (missing keys take their defaults)."""
        return cls(
            outcome=Outcome(payload.get("status", Outcome.ERROR)),
            job=JobRef.from_dict(payload.get("job")),
            message=str(payload.get("message") or ""),
            job_status=dict(payload["job_status"]) if payload.get("job_status") else None,
            pods=list(payload.get("pods") or []),
            replica_failures=[ReplicaFailure.from_dict(f) for f in payload.get("replica_failures") or []],
            log_tail={pod: list(lines) for pod, lines in (payload.get("log_tail") or {}).items()},
            events=list(payload.get("events") or []),
            notes=list(payload.get("notes") or []),
        )
