"""Why a wait ended as it did: a failed or timed-out job's failing replicas, their exit codes and last log
lines, and the recent Warning events about the job and those replicas, read from what survives of them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from airflow_provider_training import diagnostics as diag
from airflow_provider_training.kinds.base import JobKind, JobStatus, RawObject
from airflow_provider_training.outcome import WaitEvent

if TYPE_CHECKING:
    from airflow_provider_training.hooks.training import AsyncTrainingJobHook
    from airflow_provider_training.logs import ReplicaLogStreamer

TAIL_LINES = 20


class Explainer:
    """Reads the explanation of one job's end. ``note`` takes what could not be read, for the event."""

    def __init__(
        self,
        hook: AsyncTrainingJobHook,
        kind: JobKind,
        name: str,
        namespace: str,
        log: Any,
        note: Callable[[str], None],
    ) -> None:
        self.hook, self.kind, self.name, self.namespace = hook, kind, name, namespace
        self.label = f"{kind.kind} {namespace}/{name}"
        self.log, self.note = log, note
        self.events_refused = False

    async def explain(
        self,
        event: WaitEvent,
        pods: list[RawObject],
        *,
        job: RawObject | None,
        uid: str | None,
        status: JobStatus | None,
        warned: Iterable[str],
        created: str | None,
        streamer: ReplicaLogStreamer | None,
    ) -> None:
        """Failing replicas with exit codes, their last log lines, and the recent Warning events, from what
        survives: the pods' last states (as listed now or as any watch saw them), what the job's status and
        its own events record (pods may be gone: cleanPodPolicy, T9k), else the status' replica counts.
        ``warned``: the pods warned of as stuck, whose events are read too."""
        job_events = await self.events_of(self.name, self.kind.kind, uid)
        failures = diag.replica_failures(self.kind, pods)
        recorded = self.kind.failed_replicas(job) if job is not None else []
        for more in (recorded, self.kind.failures_in_events(self.name, job_events)):
            known = {f.pod for f in failures}
            failures += [f for f in more if f.pod not in known]
        if not failures and status is not None:
            failures = diag.counted_failures(self.kind, status, pods)
        event.replica_failures = failures
        by_name = {diag.pod_name(p): p for p in pods}
        since = str(created or "")
        events = list(job_events)
        for pod in {f.pod for f in failures if f.pod} | set(warned):
            if pod in by_name:
                pod_uid = (by_name[pod].get("metadata") or {}).get("uid")
                events.extend(await self.events_of(pod, "Pod", pod_uid))
            else:  # never seen, so its uid is unknown: an earlier pod of that name is older than the job
                listed = await self.events_of(pod, "Pod", None)
                events.extend(e for e in listed if diag.event_time(e) >= since)
        event.events = diag.warning_events(events)
        for failure in failures:
            if failure.pod and failure.pod not in by_name and failure.exit_code is None:
                failure.exit_code_unknown = "the pod was deleted before it could be read"
            if failure.pod:
                lines, why = await self.tail(failure.pod, failure.container, streamer)
                event.log_tail[failure.pod] = lines
                if not lines and why:
                    failure.log = why

    async def events_of(self, name: str, kind: str, uid: str | None) -> list[dict[str, Any]]:
        """The events about one object. Events only explain: when the API refuses them (403: the Role has no
        ``list`` on ``events``) or cannot serve them, the wait goes on without, with one warning and a note
        on the event; what retrying may fix is raised as for any read."""
        from airflow_provider_training.hooks.errors import KubeApiError
        from airflow_provider_training.hooks.retry import is_transient

        try:
            return await self.hook.list_events(self.namespace, name, kind, uid=uid)
        except KubeApiError as exc:
            if is_transient(exc):
                raise
            if not self.events_refused:
                self.events_refused = True
                note = f"events could not be read: {exc}"
                self.log.warning("%s: %s", self.label, note)
                self.note(note)
            return []

    async def tail(
        self, pod: str, container: str | None, streamer: ReplicaLogStreamer | None
    ) -> tuple[list[str], str]:
        """The failing replica's last lines (as the streamer saw them, else read), or none and why they could
        not be read."""
        if streamer is not None and (seen := streamer.tail(pod)):
            return list(seen)[-TAIL_LINES:], ""
        from airflow_provider_training.hooks.errors import KubeApiError

        why = ""
        for previous in (False, True):
            try:
                text = await self.hook.read_log(
                    self.namespace,
                    pod,
                    container or self.kind.default_container,
                    tail_lines=TAIL_LINES,
                    previous=previous,
                )
            except Exception as exc:
                gone = isinstance(exc, KubeApiError) and exc.status == 404
                why = why or ("the pod was deleted before its log could be read" if gone else str(exc))
                continue
            if text.strip():
                return text.splitlines()[-TAIL_LINES:], ""
        return [], why
