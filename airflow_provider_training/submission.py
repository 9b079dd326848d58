"""Submitting a job from a worker: validate, name, find an earlier try's job, create at most once.

Nothing else: reading a job's status is :mod:`~airflow_provider_training.reading`'s, waiting
:mod:`~airflow_provider_training.waiting`'s; the caller passes the one hook its execution uses.

Order of business in :meth:`JobSubmitter.submit`:

1. ``task_state_store``: the identity an earlier try stored right after its create;
2. the identity labels (dag/task/run/map index) for a try that died before storing it, or whose stored
   state was cleared;
3. create; a 409 for an object carrying our identity labels is a job another try just created.

The earlier job found in 1 or 2 is handled by ``action_if_job_exists``: ``reattach`` reuses it, except a
*failed* one, which is deleted and submitted again (a retry is meant to run the work again); ``recreate``
always deletes and submits again; ``fail`` raises. A retry therefore never creates a second job next to the
first.

An earlier try may still be alive (waiting, or in its cleanup or ``on_kill``) while this one runs, so:
every delete carries the uid it means (``preconditions.uid``: a same-named job created since is left
alone); a job being deleted is waited out, bounded by its pods' grace periods plus ``DELETION_MARGIN``;
a job of this task that appears after the earlier one was looked at belongs to another live try, and this
try waits on it instead of creating or deleting anything. The log names the try that created a job (its
``try-number`` annotation).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, assert_never

from airflow.sdk.exceptions import AirflowException

from airflow_provider_training import naming
from airflow_provider_training.outcome import JobRef
from airflow_provider_training.params import ACTIONS_IF_EXISTS, check_choice

if TYPE_CHECKING:
    from airflow_provider_training.hooks.training import TrainingJobHook
    from airflow_provider_training.kinds.base import JobKind
    from airflow_provider_training.waiting import Log

STATE_KEY = "training_job"
# Seconds, beyond the pods' grace periods, that a job being deleted may take (controllers, the garbage
# collector) before a try that waits to submit again gives up with a message naming what holds it.
DELETION_MARGIN = 30.0
# A try settles in a few rounds (delete, wait, create, meet another try's job); more means a fight.
MAX_ROUNDS = 4


class JobExistsFailure(AirflowException):
    """``action_if_job_exists="fail"`` and this task's job exists, or the name belongs to another task."""


class JobSubmitter:
    """The worker-side steps before waiting: :meth:`prepare` (no I/O), then :meth:`submit` over the sync hook.

    ``action_if_job_exists`` is checked here, where it is used: anything but ``reattach``, ``recreate`` or
    ``fail`` is refused (a ``ValueError`` naming it) before anything is sent.
    """

    def __init__(
        self,
        *,
        kubernetes_conn_id: str | None,
        action_if_job_exists: Any = "reattach",
        log: Log | None = None,
    ):
        self.kubernetes_conn_id = kubernetes_conn_id
        self.action = check_choice("action_if_job_exists", action_if_job_exists, ACTIONS_IF_EXISTS)
        self.log: Log = log or logging.getLogger(__name__)
        self.try_number: int | None = None  # the submitting try, recorded with the job (submit sets it)

    def prepare(
        self,
        job: Any,
        *,
        kind: str | None,
        api_version: str | None,
        job_name: str | None,
        namespace: str | None,
        identity: naming.TaskIdentity,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        wait_until: str | None = None,
    ) -> tuple[JobKind, dict[str, Any]]:
        """Validate and stamp the manifest; raises ``SpecError`` (or ``ValueError``) before any API call,
        also when the job can never reach ``wait_until`` (e.g. a T9k job in debug mode never succeeds).

        The namespace stays unset when neither the argument nor the manifest names one (the hook decides).
        """
        from airflow_provider_training.kinds.base import JobState
        from airflow_provider_training.kinds.registry import get_kind
        from airflow_provider_training.specs import SpecError, parse_job

        model = parse_job(job, kind=get_kind(kind, api_version) if kind else None)
        manifest = model.manifest()
        job_kind = get_kind(manifest["kind"], manifest.get("apiVersion"))
        if api_version and job_kind.api_version != api_version:
            expected = f"must be {api_version} for this operator (got {job_kind.api_version!r})"
            raise SpecError([("apiVersion", expected)], kind=job_kind.kind)
        meta = manifest.get("metadata") or {}
        limit = model.name_limit()
        name = (
            job_name
            or meta.get("name")
            or naming.default_job_name(identity, job_kind.replica_types, limit=limit)
        )
        problem = naming.name_problem(name, limit)
        if problem:
            raise SpecError([("metadata.name", problem)], kind=job_kind.kind)
        unreachable = wait_until and job_kind.check_target(manifest, JobState(wait_until))
        if unreachable:
            raise SpecError([("", unreachable)], kind=job_kind.kind)
        body = naming.stamp(
            manifest,
            name=name,
            namespace=namespace or meta.get("namespace") or "",
            labels={**labels, **identity.labels()},
            annotations={**annotations, **identity.annotations()},
        )
        return job_kind, body

    def submit(
        self, hook: TrainingJobHook, kind: JobKind, body: dict[str, Any], context: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Reattach to, replace or create the job (see the module docstring); returns the live object."""
        identity = naming.TaskIdentity.from_context(context)
        self.try_number = identity.try_number
        store = context["task_state_store"]
        meta = body["metadata"]
        meta["namespace"] = meta.get("namespace") or hook.get_namespace()
        earlier = self._previous(hook, kind, meta["namespace"], identity, stored_reference(context))
        return self._settle(hook, kind, body, identity, store, earlier)

    def _previous(
        self,
        hook: TrainingJobHook,
        kind: JobKind,
        namespace: str,
        identity: naming.TaskIdentity,
        stored: Mapping[str, Any] | None,
    ) -> dict[str, Any] | None:
        if stored is not None and stored.get("kind") == kind.kind:
            job = hook.get_job(kind, stored["name"], stored["namespace"])
            if job is not None and (job.get("metadata") or {}).get("uid") == stored.get("uid"):
                self.log.info(
                    "Found this task's %s %s/%s in the task state store",
                    kind.kind,
                    stored["namespace"],
                    stored["name"],
                )
                return job
        jobs = hook.find_jobs(kind, namespace, identity.selector())
        if len(jobs) > 1:
            self.log.warning(
                "%d %s objects carry this task's identity; using the newest", len(jobs), kind.kind
            )
        jobs.sort(key=lambda j: str((j.get("metadata") or {}).get("creationTimestamp", "")))
        return jobs[-1] if jobs else None

    def _settle(
        self,
        hook: TrainingJobHook,
        kind: JobKind,
        body: dict[str, Any],
        identity: naming.TaskIdentity,
        store: Any,
        earlier: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Only ``earlier`` (found before anything was sent) is subject to ``action_if_job_exists``; a job of
        this task that appears later was created by another live try: this try waits on it, never deletes it.
        A job being deleted is waited out (:meth:`_wait_gone`) before creating."""
        from airflow_provider_training.jobs import JobExistsError, delete_job

        meta = body["metadata"]
        decided = _uid(earlier)
        job = earlier
        for _ in range(MAX_ROUNDS):
            if job is None:
                try:
                    return self._create(hook, kind, body, store)
                except JobExistsError as exc:
                    job = exc.existing or hook.get_job(kind, meta["name"], meta["namespace"])
                    if job is not None and not identity.owns(job):
                        raise JobExistsFailure(
                            f"{exc}; it was not created by this task (its identity labels differ). "
                            "Choose another job_name, or delete it."
                        ) from exc
                    if job is None:
                        continue  # gone again meanwhile: create again
            if _terminating(job):
                self._wait_gone(hook, kind, job, False)
                job = None
                continue
            cleared = _uid(job) == decided and identity.cleared_since(job)
            if cleared:
                self.log.info(
                    "The task was cleared since %s (%s) was created: deleting it and submitting again",
                    _label(kind, job),
                    _creator(job),
                )
            elif _uid(job) == decided and self.action == "fail":
                raise JobExistsFailure(
                    f"{_label(kind, job)} exists from an earlier try ({_creator(job)}) and "
                    "action_if_job_exists='fail'"
                )
            if _uid(job) != decided:
                self.log.info(
                    "%s was created by another live try (%s) while this try (%d) was submitting; "
                    "waiting on it instead of creating another",
                    _label(kind, job),
                    _creator(job),
                    identity.try_number,
                )
                self._remember(store, JobRef.of(kind, job))
                return job
            if not cleared and self._reuses(hook, kind, job):
                self._remember(store, JobRef.of(kind, job))
                return job
            name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
            if hook.run(delete_job(hook.async_hook, kind, name, namespace, uid=decided)):
                self._wait_gone(hook, kind, job, True)
            decided, job = None, None  # gone, or another try's by now (the create meets it: 409)
            if meta["name"] != (earlier or {}).get("metadata", {}).get("name"):
                self.log.info("Submitting under the new name %s", meta["name"])
        raise AirflowException(
            f"{kind.kind} {meta['namespace']}/{meta['name']}: other tries kept creating and deleting it; "
            f"gave up after {MAX_ROUNDS} rounds"
        )

    def _reuses(self, hook: TrainingJobHook, kind: JobKind, job: dict[str, Any]) -> bool:
        """Whether the earlier try's job is kept (``reattach`` and not Failed); logs the decision."""
        from airflow_provider_training.kinds.base import JobState
        from airflow_provider_training.reading import read_status

        label = f"{_label(kind, job)} ({_creator(job)})"
        match self.action:
            case "reattach":
                status = read_status(hook, kind, job)
                if status.state is not JobState.FAILED:
                    self.log.info("Reattaching to %s (state %s)", label, status.state.value)
                    return True
                self.log.info(
                    "The earlier %s failed (%s); deleting it and submitting again", label, status.reason
                )
            case "recreate":
                self.log.info("Deleting the earlier %s (action_if_job_exists='recreate')", label)
            case "fail":  # refused in _settle before the job is looked at again
                raise AssertionError("action_if_job_exists='fail' never reuses or replaces a job")
            case _:
                assert_never(self.action)
        return False

    def _wait_gone(self, hook: TrainingJobHook, kind: JobKind, job: dict[str, Any], ours: bool) -> None:
        """Wait until this object (by uid) is gone, at most the longest grace period of its pods plus
        ``DELETION_MARGIN`` seconds (for controllers and the garbage collector)."""
        from airflow_provider_training.jobs import wait_job_deleted

        meta = job["metadata"]
        pods = hook.list_job_pods(kind, meta["name"], meta["namespace"])
        timeout = max((_grace_period(pod) for pod in pods), default=0.0) + DELETION_MARGIN
        who = "this try" if ours else "an earlier try's cleanup or a user"
        self.log.info(
            "Waiting up to %g s for %s (uid %s), deleted by %s, to be gone",
            timeout,
            _label(kind, job),
            meta["uid"],
            who,
        )
        gone = wait_job_deleted(
            hook.async_hook, kind, meta["name"], meta["namespace"], timeout=timeout, uid=meta["uid"]
        )
        if hook.run(gone):
            return
        now = hook.get_job(kind, meta["name"], meta["namespace"]) or job
        finalizers = (now.get("metadata") or {}).get("finalizers") or []
        left = len(hook.list_job_pods(kind, meta["name"], meta["namespace"]))
        raise AirflowException(
            f"{_label(kind, job)} (uid {meta['uid']}) is still being deleted {timeout:g} s after this try "
            f"began waiting (deleted by {who}; finalizers: {', '.join(finalizers) or 'none'}; {left} pod(s) "
            "left), so it cannot be submitted again yet. A finalizer no controller removes keeps it "
            "forever: check the controllers it names, or remove it; a retry resumes from here."
        )

    def _create(
        self, hook: TrainingJobHook, kind: JobKind, body: dict[str, Any], store: Any
    ) -> dict[str, Any]:
        from airflow_provider_training.jobs import create_job

        job = hook.run(create_job(hook.async_hook, kind, body, body["metadata"]["namespace"]))
        ref = JobRef.of(kind, job)
        self._remember(store, ref)
        self.log.info("Created %s (uid %s)", ref.label, ref.uid)
        return job

    def _remember(self, store: Any, ref: JobRef) -> None:
        """Persist the job identity for the next try, with the connection and the try that stored it (what
        the Training tab of the Airflow UI reads, as the serialized DAG keeps neither)."""
        store.set(
            STATE_KEY,
            {**ref.to_dict(), "kubernetes_conn_id": self.kubernetes_conn_id, "try_number": self.try_number},
        )


def _uid(job: Mapping[str, Any] | None) -> str | None:
    return ((job or {}).get("metadata") or {}).get("uid")


def _label(kind: JobKind, job: Mapping[str, Any]) -> str:
    meta = job.get("metadata") or {}
    return f"{kind.kind} {meta.get('namespace')}/{meta.get('name')}"


def _creator(job: Mapping[str, Any]) -> str:
    """Which try created the job, from its try-number annotation: "created by try 2"."""
    number = ((job.get("metadata") or {}).get("annotations") or {}).get(naming.TRY_NUMBER)
    return f"created by try {number}" if number else "creator unknown"


def _terminating(job: Mapping[str, Any]) -> bool:
    return bool((job.get("metadata") or {}).get("deletionTimestamp"))


def _grace_period(pod: Mapping[str, Any]) -> float:
    """How long the kubelet may take to stop the pod: its deletion grace period, else its spec's (30 s)."""
    seconds = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
    if seconds is None:
        seconds = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(30 if seconds is None else seconds)


def stored_reference(context: Mapping[str, Any]) -> dict[str, Any] | None:
    """The job identity this task instance's latest try stored after its create, if any."""
    stored = context["task_state_store"].get(STATE_KEY)
    return dict(stored) if isinstance(stored, Mapping) else None
