"""A job's status as it is now: over the worker's sync hook for the reattach decision, the suspend and resume
operators and ``wait_until=None``; over the async hook for a trigger's kill decision. Waiting and concluding a
wait are :mod:`.waiting`'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_training.hooks.training import AsyncTrainingJobHook, TrainingJobHook
    from airflow_provider_training.kinds.base import ChildObjects, JobKind, JobStatus


def read_status(hook: TrainingJobHook, kind: JobKind, job: Mapping[str, Any]) -> JobStatus:
    """The job's status, with its status children read first where the kind needs them."""
    return hook.run(aread_status(hook.async_hook, kind, job))


async def aread_status(hook: AsyncTrainingJobHook, kind: JobKind, job: Mapping[str, Any]) -> JobStatus:
    """:func:`read_status` over the async hook."""
    meta = job.get("metadata") or {}
    needs_children = any(c.needed_for_status for c in kind.children)
    listed = await hook.list_children(kind, meta["name"], meta["namespace"]) if needs_children else {}
    children: ChildObjects = {key: list(objects) for key, objects in listed.items()}
    return kind.status(job, children, now=(await hook.server_clock()).now())
