"""What the provider does to a training job as a whole, over the hook's API calls: create it at most once,
delete it with the children its controller leaves behind, wait until a deletion is done.

The hook (:mod:`~airflow_provider_training.hooks.training`) sends single requests; the rules here are about
jobs. Each function is async, on an :class:`~airflow_provider_training.hooks.training.AsyncTrainingJobHook`;
sync code runs it on its hook's loop: ``hook.run(delete_job(hook.async_hook, ...))``.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_training.hooks.errors import KubeApiError

if TYPE_CHECKING:
    from airflow_provider_training.hooks.training import AsyncTrainingJobHook
    from airflow_provider_training.kinds.base import JobKind


class JobExistsError(Exception):
    """A job with this name already exists and is not the one this hook just created."""

    def __init__(
        self, kind: str, namespace: str, name: str, existing: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(f'{kind} "{name}" already exists in namespace "{namespace}"')
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.existing = dict(existing) if existing is not None else None


async def create_job(
    hook: AsyncTrainingJobHook, kind: JobKind, body: Mapping[str, Any], namespace: str
) -> dict[str, Any]:
    """Create the job; :class:`JobExistsError` if one of that name exists that is not ours.

    The create is retried like any call: a 409 on a retry returns the object when it carries what we sent
    (our earlier attempt went through, its answer was lost). A manifest without a name (``generateName``) is
    sent once: a retry could create a second job.
    """
    manifest = copy.deepcopy(dict(body))
    manifest.setdefault("apiVersion", kind.api_version)
    manifest.setdefault("kind", kind.kind)
    manifest.setdefault("metadata", {}).setdefault("namespace", namespace)
    name = manifest["metadata"].get("name")

    async def attempt(number: int) -> dict[str, Any]:
        try:
            return await hook.create_object(kind.resource, namespace, manifest)
        except KubeApiError as err:
            if err.status != 409 or not name:
                raise
            existing = await hook.get_job(kind, name, namespace)
            if number > 1 and existing is not None and _carries(existing, manifest):
                return existing
            raise JobExistsError(kind.kind, namespace, name, existing) from err

    return await hook.retry.call(attempt) if name else await attempt(1)


def _carries(existing: Mapping[str, Any], sent: Mapping[str, Any]) -> bool:
    """Whether ``existing`` is the object we sent: our labels and annotations, else (without any) our spec."""
    ours = sent.get("metadata", {})
    theirs = existing.get("metadata", {})
    marks = [(key, ours.get(key) or {}) for key in ("labels", "annotations")]
    if not any(values for _, values in marks):
        return existing.get("spec") == sent.get("spec")
    return all(
        (theirs.get(key) or {}).get(label) == value
        for key, values in marks
        for label, value in values.items()
    )


async def delete_job(
    hook: AsyncTrainingJobHook,
    kind: JobKind,
    name: str,
    namespace: str,
    *,
    propagation_policy: str | None = None,
    uid: str | None = None,
) -> bool:
    """Delete the job and its ``delete_on_cleanup`` children; ``False`` if the job was already gone, or,
    given ``uid``, if that name is now another object (another try's job): it and its children stay.

    Children go in the order the kind lists them (controllers before their pods, so no ReplicaSet or
    Job recreates a pod just deleted), named ones by name, the others found by selector. They are
    deleted even when the job itself was gone, so a second cleanup removes what the first left.
    ``propagation_policy``: default the kind's :attr:`JobKind.delete_propagation`.
    """
    try:
        existed = await hook.delete_object(
            kind.resource,
            name,
            namespace,
            propagation_policy=propagation_policy or kind.delete_propagation,
            uid=uid,
        )
    except KubeApiError as err:
        if uid and err.status == 409:  # "Precondition failed: UID in precondition: ..."
            return False
        raise
    done: set[tuple[str, str]] = set()
    for child in kind.children:
        if not child.delete_on_cleanup:
            continue
        if child.name is not None:
            names = [child.name(name)]
        else:
            names = [
                item["metadata"]["name"] for item in await hook.find_children(kind, child, name, namespace)
            ]
        for child_name in names:
            if (child.resource.key, child_name) not in done:
                done.add((child.resource.key, child_name))
                await hook.delete_object(
                    child.resource, child_name, namespace, propagation_policy="Background"
                )
    return existed


async def wait_job_deleted(
    hook: AsyncTrainingJobHook,
    kind: JobKind,
    name: str,
    namespace: str,
    *,
    timeout: float = 120.0,
    interval: float = 0.5,
    uid: str | None = None,
) -> bool:
    """Wait until the job (given ``uid``: that object) no longer exists (foreground deletion takes a
    while); ``False`` on timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (job := await hook.get_job(kind, name, namespace)) is not None and uid in (
        None,
        job["metadata"].get("uid"),
    ):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(interval)
    return True
