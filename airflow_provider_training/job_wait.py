"""What a deferred task waits for, as one serializable value: :class:`JobWait` (the job, how to wait for it,
what to do once it ended), the one argument of
:class:`~airflow_provider_training.triggers.training.TrainingJobTrigger`.

The operators and sensors build it in one place each; the trigger serializes it as one keyword argument
(:meth:`JobWait.to_dict`) and rebuilds it with :meth:`JobWait.from_kwargs`, which also reads the flat keyword
arguments of triggers serialized by earlier versions (a task deferred before an upgrade goes on as it was).
:class:`WaitOptions` is what :class:`~airflow_provider_training.waiting.JobWaiter` reads;
:class:`FinishOptions` what :mod:`~airflow_provider_training.completion` and the trigger's ``on_kill`` read.
A new option is a field here and the line that reads it there. Each value checks its fields when built (with
the operators' errors). Pure data, cheap to import (the triggerer imports it on its loop, the API server in
the kill listener).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_provider_training.kinds.base import JobState, parse_time
from airflow_provider_training.outcome import JobRef
from airflow_provider_training.params import (
    DECIDING,
    ON_FINISH_ACTIONS,
    ON_KILL_ACTIONS,
    TARGET_STATES,
    OnFinishAction,
    OnKillAction,
    check_choice,
    check_log_replicas,
    check_max_log_streams,
    check_max_restarts,
    check_optional_seconds,
    check_seconds,
)

# A field set when the wait runs (by the trigger, from its job and its saved log position), never serialized.
RUNTIME = {"runtime": True}


@dataclass(frozen=True, slots=True)
class WaitOptions:
    """How to wait: what :class:`~airflow_provider_training.waiting.JobWaiter` reads (``opts``)."""

    target: JobState = JobState.SUCCEEDED  # Succeeded, or Running (a Succeeded job satisfies Running too)
    deadline: datetime | None = None  # the wait ends with ``timeout`` then
    startup_timeout: float | None = None  # seconds after creation (or resumption) for a replica pod to start
    status_grace_period: float = 60.0  # seconds an empty status is tolerated (the training operator is down)
    check_interval: float = 5.0  # the longest time between the time-based checks (deadline, startup)
    get_logs: bool = True  # stream replica logs into the waiter's log
    log_replicas: str | list[str] = DECIDING  # "deciding" ("master" its old name), "all" or replica types
    max_log_streams: int | None = None  # ReplicaLogStreamer's max_streams
    allow_missing: bool = False  # keep waiting while the job does not exist yet (sensors)
    max_restarts: int | None = None  # restarts of one replica past which a failing one ends the wait
    uid: str | None = field(default=None, metadata=RUNTIME)  # the job's (JobWait.job's)
    log_resume: Mapping[str, Any] | None = field(default=None, metadata=RUNTIME)  # earlier streams' cursors
    log_mark_until: int | None = field(default=None, metadata=RUNTIME)  # lines stamped up to this may repeat

    def __post_init__(self) -> None:
        check_choice("target_state", JobState(self.target).value, TARGET_STATES)
        check_optional_seconds("startup_timeout", self.startup_timeout)
        check_seconds("check_interval", self.check_interval)
        check_log_replicas(self.log_replicas)
        check_max_log_streams(self.max_log_streams)
        check_max_restarts(self.max_restarts)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: the target's name, the deadline as ISO-8601 text; no runtime field."""
        values = _plain(self)
        values["target"] = self.target.value
        values["deadline"] = self.deadline.isoformat() if self.deadline is not None else None
        return values

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WaitOptions:
        """From :meth:`to_dict`'s output (a missing key takes its default)."""
        values = _known(cls, data)
        values["target"] = JobState(values.get("target", JobState.SUCCEEDED))
        values["deadline"] = parse_time(values.get("deadline"))
        return cls(**values)


@dataclass(frozen=True, slots=True)
class FinishOptions:
    """What becomes of the job and the task once the wait ended, or when the task is killed."""

    on_finish_action: OnFinishAction = "keep"  # keep, delete or delete_succeeded, once the job finished
    on_kill_action: OnKillAction = "delete"  # delete the job when the deferred task is killed, or keep it
    end_from_trigger: bool = False  # a deferred success ends the task in the triggerer (no worker resumes)
    push_result: bool = True  # push the result XCom when ending the task there (the operator's do_xcom_push)
    return_value_from_log: bool = False  # the result is the value the deciding replica logged (decorators)
    multiple_outputs: bool = False  # also push each key of the result as an XCom, as a worker does

    def __post_init__(self) -> None:
        check_choice("on_finish_action", self.on_finish_action, ON_FINISH_ACTIONS)
        check_choice("on_kill_action", self.on_kill_action, ON_KILL_ACTIONS)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FinishOptions:
        return cls(**_known(cls, data))


@dataclass(frozen=True, slots=True)
class JobWait:
    """Which job, on which connection, waited for how, finished how; ``try_number`` is the try that deferred
    (a kill seen once the task instance is at another try deletes nothing; ``None``: not checked)."""

    job: JobRef
    kubernetes_conn_id: str | None = "kubernetes_default"
    wait: WaitOptions = field(default_factory=WaitOptions)
    finish: FinishOptions = field(default_factory=FinishOptions)
    try_number: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job.to_dict(),
            "kubernetes_conn_id": self.kubernetes_conn_id,
            "wait": self.wait.to_dict(),
            "finish": self.finish.to_dict(),
            "try_number": self.try_number,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobWait:
        job = JobRef.from_dict(data.get("job"))
        if job is None:
            raise ValueError(f"a JobWait needs its job (name, namespace, kind, api_version); got {data!r}")
        return cls(
            job=job,
            kubernetes_conn_id=data.get("kubernetes_conn_id", "kubernetes_default"),
            wait=WaitOptions.from_dict(data.get("wait") or {}),
            finish=FinishOptions.from_dict(data.get("finish") or {}),
            try_number=data.get("try_number"),
        )

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> JobWait:
        """From a trigger's serialized keyword arguments: ``{"job_wait": to_dict()}``, or the flat ones of
        earlier versions (:meth:`from_earlier_kwargs`)."""
        if "job_wait" in kwargs:
            extra = sorted(set(kwargs) - {"job_wait"})
            if extra:
                raise TypeError(f"job_wait comes alone; got also {', '.join(extra)}")
            wait = kwargs["job_wait"]
            return wait if isinstance(wait, JobWait) else cls.from_dict(wait)
        return cls.from_earlier_kwargs(kwargs)

    @classmethod
    def from_earlier_kwargs(cls, kwargs: Mapping[str, Any]) -> JobWait:
        """From the flat keyword arguments ``TrainingJobTrigger`` took (and serialized) before this value:
        the job's ``kind``, ``api_version``, ``job_name``, ``namespace`` and ``uid``,
        ``kubernetes_conn_id``, ``try_number``, ``target_state``, ``deadline`` (ISO-8601 text),
        ``poll_interval`` (``check_interval``'s earlier name; it wins), and the fields of
        :class:`WaitOptions` and :class:`FinishOptions` by name. A key missing takes its default, as those
        versions did; an unknown one is refused."""
        known = _serialized(WaitOptions) | _serialized(FinishOptions)
        job_keys = {"kind", "api_version", "job_name", "namespace", "uid", "kubernetes_conn_id", "try_number"}
        unknown = sorted(set(kwargs) - known - job_keys - {"target_state", "poll_interval"})
        if unknown:
            raise TypeError(f"TrainingJobTrigger got unexpected keyword argument(s) {', '.join(unknown)}")
        values = dict(kwargs)
        values["target"] = kwargs.get("target_state", JobState.SUCCEEDED.value)
        if kwargs.get("poll_interval") is not None:
            values["check_interval"] = kwargs["poll_interval"]
        job = JobRef(
            kwargs["job_name"], kwargs["namespace"], kwargs.get("uid"), kwargs["kind"], kwargs["api_version"]
        )
        return cls(
            job=job,
            kubernetes_conn_id=kwargs.get("kubernetes_conn_id", "kubernetes_default"),
            wait=WaitOptions.from_dict(values),
            finish=FinishOptions.from_dict(values),
            try_number=kwargs.get("try_number"),
        )

    @property
    def label(self) -> str:
        """``PyTorchJob default/mnist``."""
        return self.job.label


def _plain(options: Any) -> dict[str, Any]:
    """The serialized fields of ``options`` (a dataclass), lists copied."""
    return {f.name: _copy(getattr(options, f.name)) for f in dataclasses.fields(options) if not f.metadata}


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list | tuple) else value


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that are serialized fields of ``cls`` (a later version's extra keys: left)."""
    return {key: value for key, value in data.items() if key in _serialized(cls)}


def _serialized(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if not f.metadata}
