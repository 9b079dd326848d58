"""What a finished wait becomes: the XCom result, or an error that says why.

The waiter's :class:`~airflow_provider_training.outcome.WaitEvent` is the single input for both, so the
deferrable path, the sync path and the sensor tell the user the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_training.diagnostics import format_events
from airflow_provider_training.outcome import Outcome, ReplicaFailure, WaitEvent


class TrainingJobError(AirflowException):
    """The job did not reach its target state; ``event`` holds everything known about why (the payload)."""

    def __init__(self, message: str, event: WaitEvent | None = None):
        super().__init__(message)
        self.event: dict[str, Any] = event.to_payload() if event is not None else {}

    @property
    def status(self) -> str:
        return str(self.event.get("status", Outcome.ERROR.value))


class TrainingJobSensorError(TrainingJobError, AirflowFailException):
    """Raised by sensors: no retry, and ``soft_fail`` turns it into a skip."""


def job_label(job: Mapping[str, Any]) -> str:
    return f"{job.get('kind', 'job')} {job.get('namespace', '?')}/{job.get('name', '?')}"


def build_result(event: WaitEvent) -> dict[str, Any]:
    """The XCom return value: identity, final status, replica table, pod names and times; ``progress`` (what
    the training itself reported: progress, metrics) for kinds whose status has it."""
    job = event.job.to_dict() if event.job else {}
    status = event.job_status or {}
    return {
        "name": job.get("name"),
        "namespace": job.get("namespace"),
        "uid": job.get("uid"),
        "kind": job.get("kind"),
        "api_version": job.get("api_version"),
        "state": status.get("state"),
        "reason": status.get("reason", ""),
        "message": status.get("message", ""),
        "replicas": status.get("replicas", {}),
        "pods": list(event.pods),
        "start": status.get("start"),
        "end": status.get("end"),
        "duration_seconds": status.get("duration_seconds"),
        **({"progress": status["progress"]} if status.get("progress") else {}),
    }


def result_line(result: Mapping[str, Any]) -> str:
    """The last line a successful task logs: ``PyTorchJob default/mnist is Succeeded``."""
    return f"{job_label(result)} is {result.get('state')}"


_ENDED = {Outcome.FAILED: "failed", Outcome.TIMEOUT: "timed out", Outcome.DELETED: "was deleted"}


def failure_message(event: WaitEvent) -> str:
    """A multi-line explanation of a failed, timed out, deleted or broken wait."""
    status = event.job_status or {}
    outcome = _ENDED.get(
        event.outcome, "was never picked up" if status.get("stalled") else "could not be followed"
    )
    job = event.job.to_dict() if event.job else {}
    lines = [f"{job_label(job)} {outcome}: {event.message}".rstrip(": ")]
    if status:
        state = f"state {status.get('state')}"
        if status.get("reason"):
            state += f", reason {status['reason']}"
        if status.get("message") and status["message"] != event.message:
            state += f": {status['message']}"
        lines.append(f"Job status: {state}")
    if event.replica_failures:
        lines.append("Failing replicas:")
    for failure in event.replica_failures:
        lines += _failure_lines(failure, event.log_tail.get(failure.pod or "") or [])
    explained = {f.pod for f in event.replica_failures}
    for pod, tail in event.log_tail.items():
        if tail and pod not in explained:
            lines.append(f"Last {len(tail)} log lines of {pod}:")
            lines.extend(f"    | {line}" for line in tail)
    if event.events:
        lines.append("Recent warning events:")
        lines.extend(f"  {e}" for e in format_events(event.events))
    lines.extend(f"Note: {note}" for note in event.notes)
    return "\n".join(lines)


def _failure_lines(f: ReplicaFailure, tail: list[str]) -> list[str]:
    """One failing replica, and its last log lines (or why there are none)."""
    if f.count:  # only the job status' count is known
        return [f"  {f.where}: {f.count} failed, {f.message or 'exit code unknown'}"]
    exit_text = "no exit code" if f.exit_code is None else f"exit code {f.exit_code}"
    if f.exit_code_unknown:
        exit_text = f"exit code unknown: {f.exit_code_unknown}"
    detail = f"  {f.where} (pod {f.pod or '-'}, container {f.container or '-'}): {exit_text}"
    if f.reason:
        detail += f", reason {f.reason}"
    if f.message:
        detail += f": {f.message.strip()}"
    if f.restarts:
        detail += f" (restarts: {f.restarts})"
    if f.source == "events":
        detail += " (from the job's events)"
    lines = [detail]
    if tail:
        lines.append(f"    last {len(tail)} log lines of {f.pod}:")
        lines.extend(f"    | {line}" for line in tail)
    elif f.log:
        lines.append(f"    no log lines: {f.log}")
    return lines


def raise_for_event(event: WaitEvent, error_cls: type[TrainingJobError] = TrainingJobError) -> None:
    """Raise ``error_cls`` unless the event reports success."""
    if not event.succeeded:
        raise error_cls(failure_message(event), event)
