"""Pure readings of replica pods and events: stuck replicas, failing replicas, the replica table.

The trigger feeds these with objects it read through the hook; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_training.kinds.base import JobKind, JobStatus, RawObject, ReplicaFailure

STUCK_WAITING_REASONS = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff", "CreateContainerConfigError", "InvalidImageName"}
)
STARTED_PHASES = frozenset({"Running", "Succeeded", "Failed"})


def replica_table(status: JobStatus) -> str:
    """A fixed-width table of the replica counts, one row per replica type."""
    rows = [("TYPE", "DESIRED", "ACTIVE", "SUCCEEDED", "FAILED")]
    for rtype, c in sorted(status.replicas.items()):
        desired = "-" if c.desired is None else str(c.desired)
        rows.append((rtype, desired, str(c.active), str(c.succeeded), str(c.failed)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def _container_statuses(pod: RawObject) -> list[Mapping[str, Any]]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def stuck_reasons(pod: RawObject) -> list[tuple[str, str]]:
    """``(reason, message)`` for each way this pod is stuck: unschedulable or a container in back-off."""
    found: list[tuple[str, str]] = []
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            found.append((cond.get("reason") or "Unschedulable", cond.get("message") or ""))
    for cs in _container_statuses(pod):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_WAITING_REASONS:
            found.append((waiting["reason"], f"container {cs.get('name')}: {waiting.get('message') or ''}"))
    return found


def restarts(pod: RawObject) -> tuple[int, str | None, int | None]:
    """The pod's most restarted container: its ``restartCount``, its name, and the non-zero exit code its
    latest finished run ended with (``None``: it has not failed, or its latest run succeeded)."""
    statuses = _container_statuses(pod)
    if not statuses:
        return 0, None, None
    cs = max(statuses, key=lambda cs: int(cs.get("restartCount") or 0))
    term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated") or {}
    exit_code = int(term.get("exitCode") or 0)
    return int(cs.get("restartCount") or 0), cs.get("name"), exit_code or None


def pod_started(pod: RawObject) -> bool:
    return (pod.get("status") or {}).get("phase") in STARTED_PHASES


def pod_name(pod: RawObject) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def replica_failures(kind: JobKind, pods: Iterable[RawObject]) -> list[ReplicaFailure]:
    """Each failing replica: pod, replica type and index, container, exit code and termination reason.

    A container counts as failing when its current or previous run terminated with a non-zero exit code;
    the kind's default container is listed first, as its exit code is the one the operator acts on.
    """
    failures: list[ReplicaFailure] = []
    for pod in pods:
        replica = kind.replica_of_pod(pod)
        statuses = sorted(_container_statuses(pod), key=lambda cs: cs.get("name") != kind.default_container)
        for cs in statuses:
            # The current run if it ended, else the previous run of a restarting container.
            term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
            if term and int(term.get("exitCode", 0)) != 0:
                failures.append(
                    ReplicaFailure(
                        pod=pod_name(pod),
                        replica_type=replica.replica_type,
                        index=replica.index,
                        container=cs.get("name"),
                        exit_code=int(term["exitCode"]),
                        reason=term.get("reason") or "",
                        message=term.get("message") or "",
                        restarts=int(cs.get("restartCount") or 0),
                    )
                )
        if (
            not any(f.pod == pod_name(pod) for f in failures)
            and (pod.get("status") or {}).get("phase") == "Failed"
        ):
            status = pod.get("status") or {}
            failures.append(
                ReplicaFailure(
                    pod=pod_name(pod),
                    replica_type=replica.replica_type,
                    index=replica.index,
                    reason=status.get("reason") or "Failed",
                    message=status.get("message") or "",
                )
            )
    return failures


def counted_failures(kind: JobKind, status: JobStatus, pods: Iterable[RawObject]) -> list[ReplicaFailure]:
    """When no pod, status or event names a failing replica: the replica types the status counts failed
    replicas of, saying plainly that their exit codes are unknown (and why, when their pods are gone)."""
    present = {kind.replica_of_pod(pod).replica_type for pod in pods}
    return [
        ReplicaFailure(
            replica_type=rtype,
            message="exit code unknown"
            + ("" if rtype in present else ": the pods were deleted before they could be read"),
            count=counts.failed,
        )
        for rtype, counts in sorted(status.replicas.items())
        if counts.failed
    ]


def event_time(event: RawObject) -> str:
    """When an event last happened: RFC 3339 in UTC as the API writes it, so it sorts as text (``""``: never).

    The order ``kubectl events`` sorts by: ``series.lastObservedTime`` (an events.k8s.io event seen again),
    else ``lastTimestamp`` (a core/v1 recorder's last of ``count`` occurrences), else ``eventTime`` (an
    events.k8s.io event seen once, which leaves the two core/v1 timestamps unset); then, for writers that set
    none of these, ``firstTimestamp`` and the Event object's own ``metadata.creationTimestamp``.
    """
    for value in (
        (event.get("series") or {}).get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        if value:
            return str(value)
    return ""


def warning_events(events: Iterable[RawObject], limit: int = 10) -> list[dict[str, Any]]:
    """The most recent Warning events, oldest first, in a compact JSON-friendly form."""
    warnings = sorted((e for e in events if e.get("type") == "Warning"), key=event_time)
    return [
        {
            "object": f"{(e.get('involvedObject') or {}).get('kind', '')}/"
            f"{(e.get('involvedObject') or {}).get('name', '')}",
            "reason": e.get("reason") or "",
            "message": e.get("message") or "",
            "count": int(e.get("count") or 1),
            "time": event_time(e),
        }
        for e in warnings[-limit:]
    ]


def format_events(events: Iterable[Mapping[str, Any]]) -> list[str]:
    return [
        f"{e['object']}: {e['reason']}: {e['message']}" + (f" (x{e['count']})" if e["count"] > 1 else "")
        for e in events
    ]
