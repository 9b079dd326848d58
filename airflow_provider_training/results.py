"""What a finished wait becomes: the XCom result, or an error that says why.

The trigger's event is the single input for both (``TrainingJobTrigger`` documents its shape), so the
deferrable path, the sync path and the sensor tell the user the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_training.diagnostics import format_events

TAIL_LINES = 20

Event = Mapping[str, Any]


class TrainingJobError(AirflowException):
    """The job did not reach its target state; ``event`` holds everything known about why."""

    def __init__(self, message: str, event: Event | None = None):
        super().__init__(message)
        self.event = dict(event or {})

    @property
    def status(self) -> str:
        return str(self.event.get("status", "error"))


class TrainingJobSensorError(TrainingJobError, AirflowFailException):
    """Raised by sensors: no retry, and ``soft_fail`` turns it into a skip."""


def job_label(job: Mapping[str, Any]) -> str:
    return f"{job.get('kind', 'job')} {job.get('namespace', '?')}/{job.get('name', '?')}"


def build_result(event: Event) -> dict[str, Any]:
    """The XCom return value: identity, final status, replica table, pod names and times."""
    job = event.get("job") or {}
    status = event.get("job_status") or {}
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
        "pods": list(event.get("pods") or []),
        "start": status.get("start"),
        "end": status.get("end"),
        "duration_seconds": status.get("duration_seconds"),
    }


def result_line(result: Mapping[str, Any]) -> str:
    """The last line a successful task logs: ``PyTorchJob default/mnist is Succeeded``."""
    return f"{job_label(result)} is {result.get('state')}"


def finish_deletion(event: Event, on_finish_action: str) -> str | None:
    """Why the job is deleted once the wait ended (``None``: it is kept): a timed-out job always, a finished
    one as ``on_finish_action`` says; after an ``error`` event (the wait broke, not the job) it is kept."""
    state = (event.get("job_status") or {}).get("state")
    if not event.get("job"):
        return None
    if event.get("status") == "timeout":
        return "timeout"
    deletes = on_finish_action == "delete" or (
        on_finish_action == "delete_succeeded" and state == "Succeeded"
    )
    if state in ("Succeeded", "Failed") and deletes:
        return f"on_finish_action={on_finish_action!r}"
    return None


def failure_message(event: Event) -> str:
    """A multi-line explanation of a failed, timed out, deleted or broken wait."""
    job = event.get("job") or {}
    status = event.get("job_status") or {}
    outcome = {"failed": "failed", "timeout": "timed out", "deleted": "was deleted"}.get(
        str(event.get("status")), "was never picked up" if status.get("stalled") else "could not be followed"
    )
    lines = [f"{job_label(job)} {outcome}: {event.get('message') or ''}".rstrip(": ")]
    if status:
        state = f"state {status.get('state')}"
        if status.get("reason"):
            state += f", reason {status['reason']}"
        if status.get("message") and status["message"] != event.get("message"):
            state += f": {status['message']}"
        lines.append(f"Job status: {state}")
    tails = event.get("log_tail") or {}
    failures = event.get("replica_failures") or []
    if failures:
        lines.append("Failing replicas:")
    for f in failures:
        where = (
            f"{f['replica_type'].lower()}-{f['index']}" if f.get("index") is not None else f["replica_type"]
        )
        if f.get("count"):  # only the job status' count is known
            lines.append(f"  {where}: {f['count']} failed, {f.get('message') or 'exit code unknown'}")
            continue
        exit_text = "no exit code" if f.get("exit_code") is None else f"exit code {f['exit_code']}"
        if f.get("exit_code_unknown"):
            exit_text = f"exit code unknown: {f['exit_code_unknown']}"
        detail = f"  {where} (pod {f.get('pod') or '-'}, container {f.get('container') or '-'}): {exit_text}"
        if f.get("reason"):
            detail += f", reason {f['reason']}"
        if f.get("message"):
            detail += f": {f['message'].strip()}"
        if f.get("restarts"):
            detail += f" (restarts: {f['restarts']})"
        if f.get("source") == "events":
            detail += " (from the job's events)"
        lines.append(detail)
        tail = tails.get(f.get("pod") or "") or []
        if tail:
            lines.append(f"    last {len(tail)} log lines of {f['pod']}:")
            lines.extend(f"    | {line}" for line in tail)
        elif f.get("log"):
            lines.append(f"    no log lines: {f['log']}")
    for pod, tail in tails.items():
        if tail and not any(f.get("pod") == pod for f in failures):
            lines.append(f"Last {len(tail)} log lines of {pod}:")
            lines.extend(f"    | {line}" for line in tail)
    events = event.get("events") or []
    if events:
        lines.append("Recent warning events:")
        lines.extend(f"  {e}" for e in format_events(events))
    lines.extend(f"Note: {note}" for note in event.get("notes") or [])
    return "\n".join(lines)


def raise_for_event(event: Event, error_cls: type[TrainingJobError] = TrainingJobError) -> None:
    """Raise ``error_cls`` unless the event reports success."""
    if event.get("status") != "success":
        raise error_cls(failure_message(event), event)
