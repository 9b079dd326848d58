"""Kubeflow v1 `JobStatus` bookkeeping: conditions, replica counters and their JSON form.

Semantics follow the Training Operator's `pkg/util/status.go` as kubeflow-v1.md §2 describes them:
conditions are keyed by type and a changed one moves to the end of the list; Running and Restarting exclude
each other; Succeeded/Failed flip Running to False; once Failed=True nothing changes any more.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from localkube.store import now_rfc3339

CREATED, RUNNING, RESTARTING = "Created", "Running", "Restarting"
SUCCEEDED, FAILED, SUSPENDED = "Succeeded", "Failed", "Suspended"
_COUNTERS = ("active", "succeeded", "failed")


def parse_time(value: str) -> datetime:
    """An RFC 3339 timestamp as the API writes it (`2026-01-02T03:04:05Z`)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def seconds_since(value: str) -> float:
    return (datetime.now(UTC) - parse_time(value)).total_seconds()


def is_true(status: dict, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True" for c in status.get("conditions") or [])


def is_finished(status: dict) -> bool:
    return is_true(status, SUCCEEDED) or is_true(status, FAILED)


def set_condition(status: dict, type_: str, value: str, reason: str, message: str) -> None:
    """Add or replace the condition of `type_` at the end of the list (a no-op once the job failed)."""
    if is_true(status, FAILED):
        return
    conditions: list[dict] = status.setdefault("conditions", [])
    current = next((c for c in conditions if c.get("type") == type_), None)
    if current is not None and current.get("status") == value and current.get("reason") == reason:
        return
    now = now_rfc3339()
    transition = current["lastTransitionTime"] if current and current.get("status") == value else now
    kept = []
    for cond in conditions:
        if cond.get("type") == type_ or {cond.get("type"), type_} == {RUNNING, RESTARTING}:
            continue
        if type_ in (SUCCEEDED, FAILED) and cond.get("type") == RUNNING:
            cond = {**cond, "status": "False"}
        kept.append(cond)
    kept.append(
        {
            "type": type_,
            "status": value,
            "reason": reason,
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": transition,
        }
    )
    status["conditions"] = kept


def finish(status: dict, type_: str, reason: str, message: str) -> None:
    """Succeeded/Failed=True, with completionTime set once."""
    if is_true(status, FAILED):
        return
    status.setdefault("completionTime", now_rfc3339())
    set_condition(status, type_, "True", reason, message)


def reset_replica_status(status: dict, rtype: str) -> dict:
    """A fresh counter for one replica type, as every reconcile starts from zero."""
    counters = {name: 0 for name in _COUNTERS}
    status.setdefault("replicaStatuses", {})[rtype] = counters
    return counters


def count(status: dict, rtype: str, name: str) -> int:
    return int(((status.get("replicaStatuses") or {}).get(rtype) or {}).get(name) or 0)


def to_json(status: dict) -> dict:
    """The stored form: zero counters omitted (Go `omitempty`), empty maps and lists dropped."""
    out = copy.deepcopy(status)
    replicas = {
        rtype: {k: v for k, v in counters.items() if v not in (0, None, "")}
        for rtype, counters in (out.get("replicaStatuses") or {}).items()
    }
    if replicas:
        out["replicaStatuses"] = replicas
    else:
        out.pop("replicaStatuses", None)
    if not out.get("conditions"):
        out.pop("conditions", None)
    return out


def status_of(job: dict) -> dict[str, Any]:
    """A working copy of the job's status with numeric counters filled in."""
    status = copy.deepcopy(job.get("status") or {})
    for counters in (status.get("replicaStatuses") or {}).values():
        for name in _COUNTERS:
            counters[name] = int(counters.get(name) or 0)
    return status
