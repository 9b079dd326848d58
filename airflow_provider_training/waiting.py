"""The one implementation of waiting for a training job, shared by the trigger, sync operators and sensors.

:class:`JobWaiter` follows a job through the shared :class:`~airflow_provider_training.watch.WatchHub`
(the job, its replica pods and, for kinds that need them, its status children), logs state changes with a
replica table, streams replica logs, warns once per pod and reason about stuck replicas, enforces the
absolute deadline and the startup timeout, and returns one
:class:`~airflow_provider_training.outcome.WaitEvent`.
:meth:`JobWaiter.conclude` ends it in one step, without a watch, for a job that is finished already.
The trigger runs it in the triggerer; the sync mode runs it on the worker's hook (:func:`run_on`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from airflow_provider_training import diagnostics as diag
from airflow_provider_training.explain import TAIL_LINES, Explainer
from airflow_provider_training.job_wait import WaitOptions
from airflow_provider_training.kinds.base import (
    PODS,
    JobKind,
    JobState,
    JobStatus,
    RawObject,
    ResourceRef,
    parse_time,
)
from airflow_provider_training.outcome import JobRef, Outcome, WaitEvent
from airflow_provider_training.restarts import RestartCounter

if TYPE_CHECKING:
    from airflow_provider_training.hooks.training import AsyncTrainingJobHook, TrainingJobHook
    from airflow_provider_training.logs import ReplicaLogStreamer
    from airflow_provider_training.server_clock import ServerClock
    from airflow_provider_training.watch import Subscription, WatchEvent

    Inbox = asyncio.Queue[tuple[str, Any]]

T = TypeVar("T")
SUSPENDED_REMINDER_SECONDS = 300.0
FIRST_STATE_GRACE = 5.0  # how long a passed deadline waits for the job's first state, to report it
STOP_GRACE = 10.0  # how long past the deadline the last replica log lines may still be read


class Log(Protocol):
    """What the waiter logs through: an operator's, a trigger's or a module's logger."""

    def info(self, msg: Any, /, *args: Any) -> Any: ...
    def warning(self, msg: Any, /, *args: Any) -> Any: ...
    def error(self, msg: Any, /, *args: Any) -> Any: ...
    def exception(self, msg: Any, /, *args: Any) -> Any: ...


class _Finished(Exception):
    def __init__(self, outcome: Outcome, message: str, job_status: JobStatus | None = None):
        super().__init__(message)
        self.outcome, self.message, self.job_status = outcome, message, job_status


class JobWaiter:
    """Waits for one job; :meth:`wait` returns the event."""

    def __init__(
        self,
        hook: AsyncTrainingJobHook,
        kind: JobKind,
        name: str,
        namespace: str,
        options: WaitOptions,
        log: Log,
    ):
        self.hook, self.kind, self.name, self.namespace = hook, kind, name, namespace
        self.opts, self.log = options, log
        # The job, its children and its pods as the watch hub handed them (shared with the hub: read-only).
        self._job: RawObject | None = None
        self._created: str | None = None  # the job's creationTimestamp
        # The status children by resource key, then name (none for the kinds whose status is the job's own).
        self.children: dict[str, dict[str, RawObject]] = {
            child.resource.key: {} for child in kind.children if child.needed_for_status
        }
        # The last state of every replica pod seen, kept after a cleanup policy deleted the pod.
        self.seen_pods: dict[str, RawObject] = {}
        self._state: JobState | None = None  # of the job as last evaluated (its status is read when asked)
        self.uid = options.uid
        self._started = False
        self._clock: ServerClock | None = None  # the API server's, for its timestamps (wait/conclude set it)
        self._clock_start: datetime | None = None
        self._warned: set[tuple[str, str]] = set()  # (pod, reason) warned of as stuck
        limit = options.max_restarts
        self._restarts = None if limit is None else RestartCounter(kind, limit)
        self._last_seen: tuple[Any, ...] | None = None  # the last logged (state, reason, replica counts)
        self._last_message = ""
        self._suspended_logged_at: datetime | None = None
        self._streamer: ReplicaLogStreamer | None = None
        self._began = datetime.now(UTC)
        self._notes: list[str] = []  # what could not be read, for the event
        self._explainer = Explainer(hook, kind, name, namespace, log, self._note)

    def _note(self, note: str) -> None:
        self._notes.append(note)

    @property
    def label(self) -> str:
        return f"{self.kind.kind} {self.namespace}/{self.name}"

    @property
    def job(self) -> RawObject | None:
        """The job as last seen (``None``: not yet)."""
        return self._job

    async def wait(self) -> WaitEvent:
        """The event; every API read of the wait retries transient failures until the deadline."""
        from airflow_provider_training.hooks.retry import retry_until
        from airflow_provider_training.watch import WatchHub

        with retry_until(self.opts.deadline):
            inbox: Inbox = asyncio.Queue()
            subscriptions: list[Subscription] = []
            streaming: asyncio.Task[None] | None = None
            try:
                try:
                    hub = WatchHub.shared()
                    for tag, resource, selection in self._watched():
                        subscription = hub.feed(
                            self.hook,
                            resource,
                            self.namespace,
                            _deliver(inbox, tag),
                            scope=self.kind.pod_watch_selectors if resource == PODS else (),
                            **selection,
                        )
                        subscriptions.append(subscription)
                    self._clock = await self.hook.server_clock()  # only once subscribed (no await before)
                    self._began = datetime.now(UTC)
                    if self.opts.get_logs:
                        self._streamer = self._log_streamer()
                    try:
                        while True:
                            await self._handle(*await self._next(inbox))
                            # Follow once the job is known: the streamer finds its deciding replica in the
                            # job the hub now holds, instead of a GET per job when a triggerer starts N.
                            if streaming is None and self._streamer is not None and self._job is not None:
                                streaming = asyncio.create_task(self._streamer.run())
                    except _Finished as done:
                        self._drain_pods(inbox)
                        if self._streamer is not None:  # emit what is left first, and say what could not be
                            for gap in await self._stop_streamer(self._streamer):
                                self.log.warning("%s: %s", self.label, gap)
                                self._note(gap)
                        return await self._event(done)
                finally:  # the streamer before the subscriptions close, each close awaited even if one fails
                    try:
                        if streaming is not None:
                            streaming.cancel()
                            await asyncio.gather(streaming, return_exceptions=True)
                    finally:
                        await _close_all(subscriptions)
            except Exception as exc:  # an event, never a crashed trigger
                return await self._event(self._failed_read(exc))

    async def conclude(self, job: RawObject) -> WaitEvent | None:
        """The event for ``job`` as just read, when its status already ends the wait (finished, at the
        target, stalled, or never able to reach it); ``None`` while it has yet to. No watch: the status
        children (for the kinds that need them), the pods by label and, for a failure, its explanation are
        read once. A :meth:`wait` after a ``None`` goes on from what was read here."""
        from airflow_provider_training.hooks.retry import retry_until

        with retry_until(self.opts.deadline):
            try:
                self._clock = await self.hook.server_clock()
                self._take_job(job)
                if self.children:
                    listed = await self.hook.list_children(self.kind, self.name, self.namespace)
                    for key, objects in listed.items():
                        self.children[key] = {_name(obj): obj for obj in objects}
                await self._evaluate()
            except _Finished as done:
                return await self._event(done)
            except Exception as exc:
                return await self._event(self._failed_read(exc))
            return None

    def _failed_read(self, exc: Exception) -> _Finished:
        """How a read that retrying could not fix ends the wait: ``timeout`` if the deadline passed while
        it was retried, else ``error`` naming the request and why it cannot succeed."""
        from airflow_provider_training.hooks.errors import KubeApiError
        from airflow_provider_training.hooks.retry import is_transient

        text = str(exc) if isinstance(exc, KubeApiError) else f"{type(exc).__name__}: {exc}"
        deadline = self.opts.deadline
        if is_transient(exc) and deadline is not None and datetime.now(UTC) >= deadline:
            state = self._state.value if self._state else "not found"
            self.log.warning("Waiting for %s: the deadline passed while retrying %s", self.label, text)
            message = f"deadline {deadline.isoformat()} passed while {state} (last read failed: {text})"
            return _Finished(Outcome.TIMEOUT, message, self.status)
        if isinstance(exc, KubeApiError):
            text += _HINTS.get(exc.status, "")
            self.log.error("Waiting for %s failed: %s", self.label, text)
        else:
            self.log.exception("Waiting for %s failed", self.label)
        return _Finished(Outcome.ERROR, text, self.status)

    def _watched(self) -> list[tuple[str, ResourceRef, dict[str, str]]]:
        """(tag, resource, subscription) of everything followed: the job by name, the replica pods by each
        of the kind's selectors, and the status children by name or selector (merged per resource)."""
        from airflow_provider_training.hooks.training import replica_selectors

        watched: list[tuple[str, ResourceRef, dict[str, str]]] = [
            ("job", self.kind.resource, {"name": self.name})
        ]
        for selector in replica_selectors(self.kind, self.name):
            watched.append(("pod", PODS, {"label_selector": selector}))
        for child in self.kind.children:
            if child.needed_for_status:
                how = (
                    {"name": child.name(self.name)}
                    if child.name
                    else {"label_selector": child.selector(self.name)}
                )
                watched.append((child.resource.key, child.resource, how))
        return watched

    async def _handle(self, tag: str, item: Any) -> None:
        """One event from the inbox: a watch event (``job``, ``pod``, a status child's resource key), a
        ``tick`` for the time-based checks, or the ``error`` that ended a watch."""
        if tag == "error":
            raise item
        if tag == "job":
            await self._on_job(item)
        elif tag == "pod":
            await self._on_pod(item)
        elif tag in self.children:
            _apply(self.children[tag], item)
        if self._job is not None:
            await self._evaluate()
        self._check_time()

    async def _next(self, inbox: Inbox) -> tuple[str, Any]:
        """The next ``(tag, item)`` of the inbox, or a ``tick`` if none comes within :meth:`_tick` seconds:
        the time-based checks run at least that often, watch events or not."""
        try:
            async with asyncio.timeout(self._tick()):
                return await inbox.get()
        except TimeoutError:
            return "tick", None

    def _tick(self) -> float:
        """How long to wait for the next watch event; the first (the job as it is) gets a full interval."""
        tick = self.opts.check_interval
        if self.opts.deadline is not None and self._job is not None:
            tick = min(tick, max(0.0, (self.opts.deadline - datetime.now(UTC)).total_seconds()))
        return max(tick, 0.01)

    async def _on_job(self, event: WatchEvent) -> None:
        obj = event.object
        if event.type == "DELETED" or (self.uid and _uid(obj) and _uid(obj) != self.uid):
            if self._job is None and self.opts.allow_missing:
                return
            gone = "was deleted while waiting" if self._job is not None else "does not exist (any more)"
            raise _Finished(Outcome.DELETED, f"{self.label} {gone}", self.status)
        self._take_job(obj)

    def _take_job(self, obj: RawObject) -> None:
        """Keep the job's latest state; the first one is checked against the target."""
        first = self._job is None
        self._job, self.uid = obj, self.uid or _uid(obj)
        self._created = ((obj.get("metadata") or {}).get("creationTimestamp")) or None
        if first and (problem := self.kind.check_target(obj, self.opts.target)):
            raise _Finished(Outcome.ERROR, problem, None)

    async def _on_pod(self, event: WatchEvent) -> None:
        obj = event.object
        name = diag.pod_name(obj)
        if not self._record_pod(event):
            return
        if self._restarts is not None and (failing := self._restarts.count(obj)):
            raise _Finished(Outcome.FAILED, failing, self.status)
        if event.type == "DELETED":
            return
        if diag.pod_started(obj):
            self._started = True
        for reason, message in diag.stuck_reasons(obj):
            if (name, reason) not in self._warned:
                self._warned.add((name, reason))
                await self._warn_stuck(obj, reason, message)

    async def _warn_stuck(self, obj: RawObject, reason: str, message: str) -> None:
        pod = diag.pod_name(obj)
        listed = await self._explainer.events_of(pod, "Pod", _uid(obj))
        events = diag.warning_events(listed, limit=5)
        lines = "".join(f"\n    {line}" for line in diag.format_events(events))
        self.log.warning("Replica pod %s of %s is stuck: %s: %s%s", pod, self.label, reason, message, lines)

    @property
    def status(self) -> JobStatus | None:
        """The job's status as last seen (``None``: not yet), read from the kept job."""
        job = self.job
        return None if job is None else self._read_status(job)

    def _read_status(self, job: RawObject) -> JobStatus:
        children = {key: list(objects.values()) for key, objects in self.children.items()}
        return self.kind.status(job, children, grace_seconds=self.opts.status_grace_period, now=self._now())

    def _now(self) -> datetime:
        """Now on the API server's clock, which its timestamps (``creationTimestamp``) are compared with."""
        return datetime.now(UTC) if self._clock is None else self._clock.now()

    async def _evaluate(self) -> None:
        job = self.job
        assert job is not None
        status = self._read_status(job)
        self._state = status.state
        seen = (status.state, status.reason, tuple(sorted(status.replicas.items())))
        if seen != self._last_seen:
            self._last_seen = seen
            why = f" ({status.reason}: {status.message})" if status.reason or status.message else ""
            # A group in Airflow's log view: the state change is its header, standing out from the replica
            # lines around it; the replica table is inside, one click away.
            self.log.info("::group::%s is %s%s", self.label, status.state.value, why)
            self.log.info("%s", diag.replica_table(status))
            self.log.info("::endgroup::")
        elif status.progress and status.message != self._last_message:
            # What the training reports (a TrainJob's trainerStatus) moved on in the same state: one line.
            self.log.info("%s: %s", self.label, status.message)
        self._last_message = status.message
        if status.state in (JobState.RUNNING, JobState.RESTARTING, JobState.SUCCEEDED, JobState.FAILED):
            self._started = True
        if status.state == JobState.FAILED and (job.get("metadata") or {}).get("deletionTimestamp"):
            # Its operator marked it Failed as its pods went with it (a foreground delete, e.g. on_kill's):
            # the deletion is what happened to it, not a training failure.
            why = status.message or status.reason
            raise _Finished(
                Outcome.DELETED, f"{self.label} was deleted while waiting (then marked: {why})", status
            )
        if status.state == JobState.FAILED:
            raise _Finished(Outcome.FAILED, status.message or status.reason or "the job failed", status)
        if status.state == JobState.SUCCEEDED or (
            self.opts.target == JobState.RUNNING and status.state == JobState.RUNNING
        ):
            raise _Finished(Outcome.SUCCESS, f"{self.label} is {status.state.value}", status)
        if status.stalled:  # no status past the grace period: its operator seems not to be running
            raise _Finished(Outcome.ERROR, status.message, status)
        self._note_suspended(status)

    def _note_suspended(self, status: JobStatus) -> None:
        now = self._now()  # _clock_start is compared with creationTimestamp
        if status.state != JobState.SUSPENDED:
            if self._suspended_logged_at is not None:
                self._suspended_logged_at, self._clock_start = None, now
                self.log.info("%s was resumed", self.label)
            return
        last = self._suspended_logged_at
        if last is None or (now - last).total_seconds() >= SUSPENDED_REMINDER_SECONDS:
            self._suspended_logged_at = now
            until = (
                f"until the deadline {self.opts.deadline.isoformat()}"
                if self.opts.deadline
                else "(no deadline)"
            )
            why = status.message or status.reason or "suspended"
            self.log.warning("%s is suspended (%s). Waiting for it to be resumed %s", self.label, why, until)

    def _age(self) -> float:
        created = parse_time(self._created)
        start = max(filter(None, (created, self._clock_start)), default=None)
        return 0.0 if start is None else (self._now() - start).total_seconds()

    def _check_time(self) -> None:
        now = datetime.now(UTC)
        state = self._state.value if self._state else "not found"
        suspended = self._state == JobState.SUSPENDED
        # Report the job as it is, unless even its first state does not arrive in time.
        first_seen = self._job is not None or (now - self._began).total_seconds() >= FIRST_STATE_GRACE
        if self.opts.deadline is not None and now >= self.opts.deadline and first_seen:
            note = " (the job is suspended)" if suspended else ""
            raise _Finished(
                Outcome.TIMEOUT,
                f"deadline {self.opts.deadline.isoformat()} passed while {state}{note}",
                self.status,
            )
        timeout = self.opts.startup_timeout
        if (
            timeout
            and self._job is not None
            and not self._started
            and not suspended
            and self._age() >= timeout
        ):
            stuck = sorted({f"{pod}: {reason}" for pod, reason in self._warned})
            detail = f"; stuck replicas: {', '.join(stuck)}" if stuck else ""
            message = f"no replica pod started within {timeout:g}s{detail}"
            raise _Finished(Outcome.TIMEOUT, message, self.status)

    async def _stop_streamer(self, streamer: ReplicaLogStreamer) -> list[str]:
        """``streamer.stop()``, cut at the deadline (given :data:`STOP_GRACE` at least, for the last lines of
        a wait that ended at its deadline): the wait ends by then whatever the log reads do."""
        deadline = self.opts.deadline
        if deadline is None:
            return await streamer.stop()
        left = max((deadline - datetime.now(UTC)).total_seconds(), STOP_GRACE)
        stopping = asyncio.ensure_future(streamer.stop())
        try:
            done, _ = await asyncio.wait({stopping}, timeout=left)
        finally:
            stopping.cancel()  # nothing once it is done
        if done:
            return stopping.result()
        self.log.warning("%s: the deadline passed while the last replica log lines were read", self.label)
        return [f"the replica logs were cut at the deadline {deadline.isoformat()}"]

    def _log_streamer(self) -> ReplicaLogStreamer:
        from airflow_provider_training.logs import ReplicaLogStreamer

        return ReplicaLogStreamer(
            self.hook,
            self.kind,
            self.namespace,
            self.name,
            replicas=self.opts.log_replicas,
            emit=self.log.info,
            tail_lines=TAIL_LINES,  # what a failure message quotes, no more
            resume=self.opts.log_resume,
            mark_until=self.opts.log_mark_until,
            pod_times=True,
            max_streams=self.opts.max_log_streams,
        )

    @property
    def streamer(self) -> ReplicaLogStreamer | None:
        """The replica log streamer (``None`` before the wait started or without ``get_logs``)."""
        return self._streamer

    def log_cursors(self) -> dict[str, Any] | None:
        """The streamer's :meth:`~airflow_provider_training.logs.ReplicaLogStreamer.cursors` (``None``
        without a streamer): where a next trigger of the task resumes the replica logs."""
        return self._streamer.cursors() if self._streamer is not None else None

    def log_tails(self) -> dict[str, Any] | None:
        """The streamer's :meth:`~airflow_provider_training.logs.ReplicaLogStreamer.saved_tails` (``None``
        without a streamer)."""
        return self._streamer.saved_tails() if self._streamer is not None else None

    async def _event(self, done: _Finished) -> WaitEvent:
        status = done.job_status or self.status
        event = WaitEvent(
            outcome=done.outcome,
            job=self.identity(),
            job_status=status.to_dict() if status else None,
            message=done.message,
            pods=sorted(self.seen_pods),
        )
        needs_pods = done.outcome in (Outcome.FAILED, Outcome.TIMEOUT) or (
            done.outcome is Outcome.SUCCESS and not self._all_pods_seen()
        )
        if needs_pods:
            try:  # the event goes out even if these reads fail
                # The pods as they are now: the job may have ended before their watch events arrived.
                listed = await self.hook.list_job_pods(self.kind, self.name, self.namespace)
                pods = {**self.seen_pods, **{diag.pod_name(p): p for p in listed}}
                event.pods = sorted(pods)
                if not event.succeeded:
                    await self._explainer.explain(
                        event,
                        list(pods.values()),
                        job=self.job,
                        uid=self.uid,
                        status=self.status,
                        warned=[pod for pod, _ in self._warned],
                        created=self._created,
                        streamer=self._streamer,
                    )
            except Exception as exc:
                self._note(f"the explanation is incomplete: {exc}")
                self.log.warning("%s: the explanation is incomplete: %s", self.label, exc)
        event.notes = self._notes  # with what the explanation could not read
        return event

    def _drain_pods(self, queue: Inbox) -> None:
        """Apply the pod events that arrived with the final job event."""
        while not queue.empty():
            tag, item = queue.get_nowait()
            if tag == "pod":
                self._record_pod(item)

    def _record_pod(self, event: WatchEvent) -> bool:
        """Keep a watched pod's latest state if it is one of this job's replicas."""
        if not self.kind.owns_pod(self.name, event.object):
            return False
        self.seen_pods[diag.pod_name(event.object)] = event.object
        return True

    def _all_pods_seen(self) -> bool:
        """Whether the watch showed as many pods as the status says replicas are desired (no LIST needed)."""
        status = self.status
        desired = status.desired_pods() if status is not None else None
        return desired is not None and len(self.seen_pods) >= desired

    def identity(self) -> JobRef:
        return JobRef(self.name, self.namespace, self.uid, self.kind.kind, self.kind.api_version)


# A 403 says what it needs itself (KubeApiError names the verb, resource and docs/rbac.md).
_HINTS = {401: " (refused again after reloading the credentials)"}


def _deliver(inbox: Inbox, tag: str) -> Callable[[WatchEvent | BaseException], None]:
    """A watch hub ``deliver`` that queues each event with ``tag``, and the error ending the watch."""

    def put(item: WatchEvent | BaseException) -> None:
        inbox.put_nowait(("error", item) if isinstance(item, BaseException) else (tag, item))

    return put


async def _close_all(subscriptions: list[Subscription]) -> None:
    """Close each subscription, the later ones even if an earlier close fails (its error is raised)."""
    if subscriptions:
        try:
            await subscriptions[-1].close()
        finally:
            await _close_all(subscriptions[:-1])


def _uid(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("uid")


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _apply(objects: dict[str, RawObject], event: WatchEvent) -> None:
    """Apply a watch event to a name -> object map."""
    if event.type == "DELETED":
        objects.pop(_name(event.object), None)
    else:
        objects[_name(event.object)] = event.object


def run_on(hook: TrainingJobHook, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` (a :class:`JobWaiter`'s, on ``hook.async_hook``) on the sync hook's own event loop, the
    one its other calls use: the sync mode's waiting, with the execution's one hook and client."""
    return hook.run(work)
