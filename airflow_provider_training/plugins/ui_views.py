"""The JSON of ``GET /training/api/job`` (``docs/ui-tab.md``), from a task record and a cluster snapshot.

Pure: no I/O. The kind reads the status and names the replicas; :mod:`airflow_provider_training.diagnostics`
finds stuck pods; nothing here names a family.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from airflow_provider_training import diagnostics as diag
from airflow_provider_training.kinds.base import JobKind, RawObject
from airflow_provider_training.logs import container_name, replica_label
from airflow_provider_training.plugins.ui_cluster import REFRESH_SECONDS, Snapshot
from airflow_provider_training.plugins.ui_records import TaskRecord

MAX_EVENTS = 50
# Views that change by themselves (the try submits, the cluster comes back): the tab keeps refreshing.
CHANGING_VIEWS = frozenset({"not_submitted", "cluster_error"})


def plain(
    view: str, detail: str, record: TaskRecord | None = None, job: Mapping[str, Any] | None = None
) -> dict:
    """Every view but ``job``: what the tab shows instead, in one sentence."""
    return {
        "view": view,
        "detail": detail,
        "task": task_of(record),
        "job": dict(job) if job else None,
        "status": None,
        "replicas": [],
        "pods": [],
        "warnings": [],
        "events": [],
        "log_sources": saved_sources(record, set()),
        "refresh_seconds": REFRESH_SECONDS if view in CHANGING_VIEWS else None,
    }


def task_of(record: TaskRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {"try_number": record.try_number, "state": record.state, "operator": record.operator}


def job_identity(record: TaskRecord, link: str | None) -> dict[str, Any]:
    ref = record.ref or {}
    keys = ("kind", "api_version", "namespace", "name", "uid")
    return {**{key: ref.get(key) for key in keys}, "link": link or None}


def job_view(
    record: TaskRecord, kind: JobKind, snapshot: Snapshot, link: str | None, now: datetime
) -> dict[str, Any]:
    """The ``job`` view: status, replica table, pods, stuck-pod warnings, events, log sources; ``now`` on the
    API server's clock, which the tab measures the ages of the server's timestamps from."""
    assert snapshot.job is not None and snapshot.status is not None
    status = snapshot.status
    pods = sorted(snapshot.pods, key=diag.pod_name)
    finished = status.state.terminal
    return {
        "view": "job",
        "detail": status.message if status.stalled else "",
        "task": task_of(record),
        "job": job_identity(record, link),
        "status": {
            "state": status.state.value,
            "finished": finished,
            "reason": status.reason,
            "message": status.message,
            "start_time": _time(status.start),
            "completion_time": _time(status.end),
            "conditions": [_condition(c) for c in (snapshot.job.get("status") or {}).get("conditions") or []],
        },
        "replicas": [
            {
                "type": rtype,
                "expected": counts.desired,
                "active": counts.active,
                "succeeded": counts.succeeded,
                "failed": counts.failed,
            }
            for rtype, counts in sorted(status.replicas.items())
        ],
        "pods": [pod_entry(kind, pod) for pod in pods],
        "warnings": [
            {"pod": diag.pod_name(pod), "reason": reason, "message": message}
            for pod in pods
            for reason, message in diag.stuck_reasons(pod)
        ],
        "events": events_of(snapshot.events),
        "log_sources": [
            {"replica": replica_label(kind.replica_of_pod(pod)), "pod": diag.pod_name(pod), "live": True}
            for pod in pods
        ]
        + saved_sources(record, {diag.pod_name(pod) for pod in pods}),
        "refresh_seconds": None if finished else REFRESH_SECONDS,
        "server_time": _time(now),
    }


def saved_sources(record: TaskRecord | None, live: set[str]) -> list[dict[str, Any]]:
    """The pods gone from the cluster whose last lines the trigger saved."""
    tails = record.saved_tails if record is not None else {}
    return [
        {"replica": str(saved.get("replica") or pod), "pod": pod, "live": False}
        for pod, saved in sorted(tails.items())
        if pod not in live and isinstance(saved, Mapping)
    ]


def pod_entry(kind: JobKind, pod: RawObject) -> dict[str, Any]:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    container = container_name(pod, kind.default_container)
    statuses = status.get("containerStatuses") or []
    cs: dict[str, Any] = next((c for c in statuses if c.get("name") == container), {})
    state = cs.get("state") or {}
    terminated, waiting = state.get("terminated") or {}, state.get("waiting") or {}
    stuck = diag.stuck_reasons(pod)
    return {
        "name": meta.get("name"),
        "replica": replica_label(kind.replica_of_pod(pod)),
        "phase": status.get("phase"),
        "ready": any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        ),
        "restarts": int(cs.get("restartCount") or 0),
        "exit_code": terminated.get("exitCode"),
        "reason": terminated.get("reason") or waiting.get("reason") or status.get("reason"),
        "message": terminated.get("message") or waiting.get("message") or status.get("message"),
        "node": (pod.get("spec") or {}).get("nodeName"),
        "created": meta.get("creationTimestamp"),
        "warning": f"{stuck[0][0]}: {stuck[0][1]}".rstrip(": ") if stuck else None,
    }


def events_of(events: list[RawObject]) -> list[dict[str, Any]]:
    """The job's and its pods' events, newest first, at most :data:`MAX_EVENTS`."""
    newest = sorted(events, key=diag.event_time, reverse=True)[:MAX_EVENTS]
    return [
        {
            "type": e.get("type"),
            "reason": e.get("reason") or "",
            "message": e.get("message") or "",
            "object": f"{(e.get('involvedObject') or {}).get('kind', '')}/"
            f"{(e.get('involvedObject') or {}).get('name', '')}",
            "count": int(e.get("count") or 1),
            "last_time": diag.event_time(e) or None,
        }
        for e in newest
    ]


def _condition(cond: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": cond.get("type"),
        "status": cond.get("status"),
        "reason": cond.get("reason") or "",
        "message": cond.get("message") or "",
        "last_transition_time": cond.get("lastTransitionTime"),
    }


def _time(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None
