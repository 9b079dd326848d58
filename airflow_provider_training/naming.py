"""Deterministic job names and the Airflow identity a job object carries.

A retry of the same task instance must find the job an earlier try created, so both the default name and
the identity labels derive from (dag_id, task_id, run_id, map_index) only, never from the try number.
No I/O and no heavy imports: operators import this at DAG-parse time.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PREFIX = "training.airflow.apache.org"
DAG_ID = f"{PREFIX}/dag-id"
TASK_ID = f"{PREFIX}/task-id"
RUN_ID = f"{PREFIX}/run-id"
MAP_INDEX = f"{PREFIX}/map-index"
TRY_NUMBER = f"{PREFIX}/try-number"
CLEAR_NUMBER = f"{PREFIX}/clear-number"
RUN_ID_FULL = f"{PREFIX}/run-id-full"
MANAGED_BY = f"{PREFIX}/managed-by"

MAX_NAME = 63
# Room kept for "-<replica type>-<index>" on pod and service names; indexes up to 5 digits.
INDEX_DIGITS = 5
HASH_LEN = 8

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class TaskIdentity:
    """Which task instance a job belongs to."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    try_number: int = 1
    clear_number: int = 0  # the DAG run's: a clear since the job's creation means "run it again"

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> TaskIdentity:
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return cls(
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=-1 if map_index is None else int(map_index),
            try_number=int(getattr(ti, "try_number", 1) or 1),
            clear_number=int(getattr(context.get("dag_run"), "clear_number", 0) or 0),
        )

    def digest(self) -> str:
        key = f"{self.dag_id}\0{self.task_id}\0{self.run_id}\0{self.map_index}"
        return hashlib.sha256(key.encode()).hexdigest()

    def labels(self) -> dict[str, str]:
        """Identity labels (valid label values); the same for every try."""
        return {
            DAG_ID: label_value(self.dag_id),
            TASK_ID: label_value(self.task_id),
            RUN_ID: label_value(self.run_id),
            MAP_INDEX: str(self.map_index) if self.map_index >= 0 else "none",
            MANAGED_BY: "airflow",
        }

    def annotations(self) -> dict[str, str]:
        return {
            RUN_ID_FULL: self.run_id,
            TRY_NUMBER: str(self.try_number),
            CLEAR_NUMBER: str(self.clear_number),
        }

    def cleared_since(self, obj: Mapping[str, Any]) -> bool:
        """Whether the DAG run was cleared after ``obj`` (a job of an earlier try) was created: the user
        asked for the task to run again, so that job belongs to a killed try, not to this one."""
        created = ((obj.get("metadata") or {}).get("annotations") or {}).get(CLEAR_NUMBER)
        return created is not None and str(created).isdigit() and int(created) < self.clear_number

    def selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.labels().items()))

    def owns(self, obj: Mapping[str, Any]) -> bool:
        """Whether a job object carries this task instance's identity labels."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in self.labels().items())


def label_value(value: str) -> str:
    """A valid label value; values that must change (or are too long) keep a short hash of the original."""
    if len(value) <= MAX_NAME and _LABEL_VALUE.match(value):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:HASH_LEN]
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[: MAX_NAME - HASH_LEN - 1].strip("-_.")
    return f"{cleaned}-{digest}" if cleaned else digest


# Room kept for a replica type when the kind names none (its users name them): 8 characters.
UNNAMED_REPLICA_TYPE_LENGTH = 8


def max_name_length(replica_types: Iterable[str]) -> int:
    """Longest job name whose ``<job>-<replica type>-<index>`` children stay within 63 characters."""
    longest = max((len(t) for t in replica_types), default=UNNAMED_REPLICA_TYPE_LENGTH)
    return MAX_NAME - (longest + 2 + INDEX_DIGITS)


def default_job_name(identity: TaskIdentity, replica_types: Iterable[str], *, limit: int = MAX_NAME) -> str:
    """``<dag>-<task>`` made DNS-1035 and shortened, plus a hash of the full identity; at most ``limit``
    characters (the job's own limit, when it is shorter than room for every replica type makes it)."""
    limit = min(limit, max_name_length(replica_types))
    readable = re.sub(r"[^a-z0-9]+", "-", f"{identity.dag_id}-{identity.task_id}".lower()).strip("-")
    if not readable or not readable[0].isalpha():
        readable = f"j-{readable}".rstrip("-")
    readable = readable[: limit - HASH_LEN - 1].rstrip("-")
    return f"{readable}-{identity.digest()[:HASH_LEN]}"


def name_problem(name: str, limit: int, longest_suffix: str = "") -> str | None:
    """Why ``name`` cannot name a job whose names may be ``limit`` long, or ``None`` when it can: the one
    job-name check (``specs`` checks ``metadata.name`` with it, the submitter the name it sends).

    ``longest_suffix`` (``-worker-11``), when known, names the longest child name in the message."""
    if not _DNS1035.match(name):
        return (
            "must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter and "
            f"ending with a letter or digit (got {name!r})"
        )
    if len(name) > limit:
        child = f"the pod name '{name}{longest_suffix}'" if longest_suffix else "its replica pod names"
        return f"must be at most {limit} characters so that {child} stays within {MAX_NAME} (got {len(name)})"
    return None


def stamp(
    manifest: dict[str, Any],
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> dict[str, Any]:
    """Return a copy of ``manifest`` with name, namespace, extra labels and annotations set."""
    meta = dict(manifest.get("metadata") or {})
    meta["name"] = name
    meta["namespace"] = namespace
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    meta.pop("generateName", None)
    return {**manifest, "metadata": meta}
