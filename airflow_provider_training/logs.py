"""Replica log streaming: follow every chosen replica pod of a job, each line prefixed ``[worker-0] ``.

Pods are discovered through the watch hub (one shared pod watch per namespace), so a pod is followed as soon
as its container has started. "All replicas" are the pods of the kind's pod selector and its extra selectors;
every selected pod must also pass the kind's ``owns_pod`` (some APIs put no job name on their pods).

Lines are read with timestamps; a per-pod cursor (the last timestamp emitted and how many lines carried it)
makes every re-read, after a dropped connection or a container restart, resume without loss or duplicates.
The previous instance of a restarted container is read before the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import re
import resource
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.hooks.retry import is_transient
from airflow_provider_training.hooks.training import AsyncTrainingJobHook, replica_selectors
from airflow_provider_training.hooks.transport import LineStream
from airflow_provider_training.kinds.base import PODS, JobKind, ReplicaPod
from airflow_provider_training.kinds.selectors import parse_selector, selects
from airflow_provider_training.watch import DELETED, WatchEvent, WatchHub

log = logging.getLogger(__name__)

ReplicaChoice = Literal["deciding", "master", "all"] | Sequence[str]

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")
_TERMINAL_PHASES = ("Succeeded", "Failed")
# A backlog (thousands of lines at once) is parsed and emitted in steps of at most this long, and the read
# text split in pieces of about this many characters: the triggerer's other triggers run in between.
STEP_SECONDS = 0.02
PIECE_CHARS = 1 << 16
REPEAT_MARK = "(may repeat) "  # a line a triggerer killed without notice may have emitted already
# What :meth:`ReplicaLogStreamer.saved_tails` keeps for the Training tab once pods are gone (bounded: it is
# saved with the log position).
SAVED_TAIL_PODS = 16
SAVED_LINE_CHARS = 500
# How long stopping waits for the cancelled follows to end; one still running then is left behind (warned).
FOLLOW_STOP_SECONDS = 5.0

# The pods followed live on each event loop (one open log stream each, a socket and an API server
# connection), by every streamer of that loop: what ``max_streams`` counts.
_followed: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[_Pod]] = weakref.WeakKeyDictionary()


def default_stream_limit() -> int:
    """Half the process's open-file limit (``ulimit -n``): each followed pod holds a socket over plain HTTP
    (over TLS the follows share HTTP/2 connections, but each still holds a connection from the API server to
    the pod's kubelet), and the process needs descriptors for everything else (its watches, requests, the
    database, log files)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else max(1, soft // 2)


def followed_pods() -> int:
    """How many pods the streamers of the running loop follow live now."""
    return len(_followed.get(asyncio.get_running_loop(), ()))


def stamp_key(stamp: str) -> int | None:
    """An RFC 3339 (nano) timestamp as integer nanoseconds since the epoch; ``None`` if it is not one."""
    match = _STAMP.match(stamp)
    if match is None:
        return None
    zone = "+00:00" if match[3] == "Z" else match[3]
    seconds = int(datetime.fromisoformat(match[1] + zone).timestamp())
    return seconds * 1_000_000_000 + int((match[2] or "").ljust(9, "0"))


def split_stamp(line: str) -> tuple[int | None, str]:
    """``"<timestamp> text"`` (``timestamps=true``) into the timestamp key and the text."""
    stamp, _, text = line.partition(" ")
    key = stamp_key(stamp)
    return (key, text) if key is not None else (None, line)


def stamp_text(key: int) -> str:
    """A timestamp key as the ISO text of a log record's ``timestamp`` (microseconds, ``Z``)."""
    seconds, nanos = divmod(key, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=nanos // 1000)
    return moment.isoformat().replace("+00:00", "Z")


class LogCursor:
    """How far a pod's log has been emitted: the last timestamp and how many emitted lines carry it.

    ``[key, count]`` (:meth:`state`) is what a trigger persists, so that its next instance (after a triggerer
    restart) resumes the pod's log where this one stopped.
    """

    __slots__ = ("count", "key")

    def __init__(self, state: Sequence[int] | None = None) -> None:
        self.key: int | None = int(state[0]) if state else None
        self.count = int(state[1]) if state else 0

    def state(self) -> list[int] | None:
        return None if self.key is None else [self.key, self.count]

    def since(self) -> datetime | None:
        """Where a re-read starts (the API takes whole seconds; :meth:`session` drops what was emitted)."""
        if self.key is None:
            return None
        return datetime.fromtimestamp(self.key // 1_000_000_000, UTC)

    def session(self) -> Callable[[int | None], bool]:
        """A filter for one read from :meth:`since`: ``True`` for each line not emitted before."""
        return _Session(self)


class _Session:
    """:meth:`LogCursor.session`'s filter: an object of four slots, not a closure with its cells (a followed
    pod holds one for as long as its stream is open)."""

    __slots__ = ("cursor", "repeats", "start_count", "start_key")

    def __init__(self, cursor: LogCursor) -> None:
        self.cursor = cursor
        self.start_key, self.start_count = cursor.key, cursor.count
        self.repeats = 0

    def __call__(self, key: int | None) -> bool:
        if key is None:
            return True
        start_key, cursor = self.start_key, self.cursor
        if start_key is not None and key <= start_key:
            if key < start_key:
                return False
            self.repeats += 1
            if self.repeats <= self.start_count:
                return False
        if cursor.key is None or key > cursor.key:
            cursor.key, cursor.count = key, 1
        else:
            cursor.count += 1
        return True


class _Pod:
    """What the streamer knows about one followed pod (slots: a triggerer follows thousands).

    Of the pod object only what the follow reads is kept (a pod as the hub hands it is some 3 KiB of dicts):
    its uid, phase, and its container's state and restarts. While its log stream is open and silent the pod
    has no task: the stream holds the one callback that starts one (``_Follow``) when lines come.
    """

    __slots__ = (
        "changed",
        "container",
        "cursor",
        "deleted",
        "done",
        "has_run",
        "name",
        "owner",
        "phase",
        "prefix",
        "replica_type",
        "restarts",
        "restarts_read",
        "running",
        "said",
        "session",
        "stream",
        "tail",
        "tail_lines",
        "task",
        "uid",
        "unread",
        "waiter",
    )

    def __init__(
        self,
        owner: ReplicaLogStreamer,
        name: str,
        replica: ReplicaPod,
        container: str,
        pod: dict[str, Any],
        tail: int,
        cursor: Sequence[int] | None = None,
    ) -> None:
        self.owner = owner
        self.name = name
        self.replica_type = replica.replica_type
        self.prefix = f"[{replica_label(replica)}] "
        self.container = container
        self.uid = _uid(pod)
        self.see(pod)
        self.deleted = False
        self.changed = False  # updated since the follow last looked (see wait_change)
        self.waiter: asyncio.Future[None] | None = None  # while the follow waits for a change
        self.cursor = LogCursor(cursor)
        self.restarts_read: int | None = None  # restartCount when we last caught up on instances
        # Why lines of this pod may not have been emitted (None: the last read reached the end of its log).
        self.unread: str | None = "its log was not read"
        self.tail_lines = tail
        # Its last tail_lines lines joined by newlines (None: none yet): one string, not a string per line
        # (about 50 bytes each besides the text) in a list.
        self.tail: str | None = None
        self.task: asyncio.Task[None] | None = None  # while the follow runs (not while its stream is silent)
        self.stream: LineStream | None = None  # the open log stream
        self.session: Callable[[int | None], bool] | None = None  # the open stream's cursor filter
        self.said = False  # the open stream emitted a line
        self.done = False  # the follow is over

    def see(self, pod: Mapping[str, Any]) -> None:
        """Keep what the follow reads of ``pod`` (the same pod, as read again)."""
        status = pod.get("status") or {}
        self.phase = str(status.get("phase") or "")
        container: Mapping[str, Any] = {}
        for found in status.get("containerStatuses") or []:
            if found.get("name") == self.container:
                container = found
                break
        state = container.get("state") or {}
        self.running = bool(state.get("running"))
        # Whether the container has started at some point (so it has a log to read).
        self.has_run = bool(
            state.get("running")
            or state.get("terminated")
            or (container.get("lastState") or {}).get("terminated")
        )
        self.restarts = int(container.get("restartCount") or 0)

    def update(self, pod: dict[str, Any] | None) -> None:
        if pod is None:
            self.deleted = True
        else:
            self.see(pod)
        self.changed = True
        if self.waiter is not None:
            _wake(self.waiter)

    async def wait_change(self, timeout: float | None = None) -> None:
        """Until the pod changes (or ``timeout`` s), unless it changed since ``changed`` was cleared.

        The future is awaited itself, the timeout a timer that resolves it: not ``asyncio.wait_for``, which
        on Python 3.11 returns normally when the task is cancelled just as the future completes (a change
        and :meth:`ReplicaLogStreamer.stop` in the same step), so the follow went on to wait forever."""
        if self.changed:
            return
        loop = asyncio.get_running_loop()
        waiter = self.waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _wake, waiter)
        try:
            await waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()

    def add_to_tail(self, text: str) -> None:
        if self.tail_lines <= 0:
            return
        tail = text if self.tail is None else f"{self.tail}\n{text}"
        if (breaks := tail.count("\n")) >= self.tail_lines:
            tail = tail.split("\n", breaks - self.tail_lines + 1)[-1]
        self.tail = tail

    def tail_list(self) -> list[str]:
        return [] if self.tail is None else self.tail.split("\n")

    @property
    def read_to_end(self) -> bool:
        """Whether every line of its container was read: its last read or stream reached the end of the log,
        and the container, as last seen, neither runs nor restarted since (nothing more can come)."""
        return self.unread is None and not self.running and self.restarts == (self.restarts_read or 0)

    def __call__(self) -> None:
        """Its silent stream has something (the stream's one callback: the pod itself, no closure)."""
        self.owner._start(self)

    @property
    def label(self) -> str:
        """The replica as its lines are prefixed: ``master-0``."""
        return self.prefix.strip()[1:-1]


class ReplicaLogStreamer:
    """Streams the logs of a job's chosen replicas to ``emit``, one prefixed line per call.

    ``replicas``: ``"deciding"`` (alias ``"master"``: the job's :meth:`JobKind.deciding_replica`, read from
    the job once when streaming starts), ``"all"``, or a list of replica types.
    :meth:`run` follows pods as they appear until cancelled or :meth:`stop`-ped (which flushes what is left,
    and returns a note for each pod whose log could not be read to its end).
    :meth:`tail` keeps the last ``tail_lines`` lines of each pod for failure messages. ``note`` (default:
    ``emit``) gets the one line saying which replicas are followed.

    ``resume``: the :meth:`cursors` of an earlier streamer of the same job (a trigger before a triggerer
    restart): each pod goes on after its last emitted line. ``mark_until``: lines stamped at or before this
    key (ns) are marked as possibly repeated (the earlier streamer's cursors were not its last ones).
    ``pod_times``: ``emit`` is called with ``timestamp=`` the line's own (kubelet) time, so the log record
    carries the time the replica wrote it.

    ``max_streams``: how many pods the streamers of this event loop (a triggerer) may follow live at once
    (default :func:`default_stream_limit`). Past it, a streamer following more than the deciding replica
    follows only that one from then on (pods already followed go on) and says so through ``note``.
    """

    def __init__(
        self,
        hook: AsyncTrainingJobHook,
        kind: JobKind,
        namespace: str,
        job_name: str,
        *,
        replicas: ReplicaChoice = "deciding",
        emit: Callable[..., None],
        tail_lines: int = 50,
        hub: WatchHub | None = None,
        retry_interval: float = 2.0,
        note: Callable[[str], None] | None = None,
        resume: Mapping[str, Sequence[int]] | None = None,
        mark_until: int | None = None,
        pod_times: bool = False,
        max_streams: int | None = None,
    ) -> None:
        self.hook = hook
        self.kind = kind
        self.namespace = namespace
        self.job_name = job_name
        self.replicas = replicas
        self.emit = emit
        self.tail_lines = tail_lines
        self.hub = hub
        self.retry_interval = retry_interval
        self.resume = dict(resume or {})
        self.mark_until = mark_until
        self.pod_times = pod_times
        self.max_streams = max_streams
        self.emitted = 0  # lines emitted so far: tells a persister whether the cursors moved
        self._pods: dict[str, _Pod] = {}
        self._replaced: list[_Pod] = []  # earlier incarnations of a pod name, not read to their end
        self._gaps: list[str] = []
        self._runner: asyncio.Task[Any] | None = None
        self._context: contextvars.Context | None = None  # run()'s: where each follow runs and emits
        self._stopping = False
        self._finished = False
        self._finish_waiter: asyncio.Future[None] | None = None  # made by stop() only (an Event is 0.7 KiB)
        self._chosen = False
        self._narrowed = False  # following only the deciding replica (chosen so, or past max_streams)
        self.note = note or emit

    def tail(self, pod_name: str) -> list[str]:
        """The last lines seen from ``pod_name`` (without prefixes), oldest first."""
        pod = self._pods.get(pod_name)
        return pod.tail_list() if pod is not None else []

    def saved_tails(self) -> dict[str, dict[str, Any]]:
        """The last lines of the followed pods, bounded for saving (:data:`SAVED_TAIL_PODS` pods,
        ``tail_lines`` lines each cut at :data:`SAVED_LINE_CHARS` characters):
        ``{pod: {"replica", "lines"}}``."""
        return {
            name: {"replica": pod.label, "lines": [line[:SAVED_LINE_CHARS] for line in pod.tail_list()]}
            for name, pod in list(self._pods.items())[:SAVED_TAIL_PODS]
            if pod.tail is not None
        }

    @property
    def pod_names(self) -> list[str]:
        """The pods followed so far."""
        return list(self._pods)

    def cursors(self) -> dict[str, list[int]]:
        """Each pod incarnation's cursor by pod uid (JSON-friendly): the ``resume`` of a next streamer."""
        found = {uid: list(state) for uid, state in self.resume.items()}
        for pod in self._pods.values():
            if (state := pod.cursor.state()) is not None:
                found[pod.uid or pod.name] = state
        return found

    def _selectors(self) -> tuple[str, ...]:
        return replica_selectors(self.kind, self.job_name, master=self.replicas == "master")

    def _wanted(self, pod: dict[str, Any], replica_type: str) -> bool:
        if self.replicas == "master":  # the subscription selects these, unless narrowed to them later
            return selects(parse_selector(self.kind.master_selector(self.job_name)), pod)
        if isinstance(self.replicas, str):
            return True
        return replica_type.lower() in {r.lower() for r in self.replicas}

    async def run(self) -> None:
        """Follow the chosen replicas until cancelled, or until :meth:`stop` (then return normally)."""
        if self._stopping:
            return  # stopped before it ran: stop() has read the logs once
        self._runner = asyncio.current_task()
        hub = self.hub or WatchHub.shared()
        try:
            await self._choose()
            # Each pod event is handled as the hub delivers it (no queue and task of our own); a watch that
            # failed, or an event that could not be handled, ends the run with its error. The hub delivers
            # from its watch's task, started in whichever trigger's context subscribed first: the event is
            # handled in this run's context, so that what it writes, and the follow tasks it starts, are this
            # trigger's (a triggerer routes a record to a task's log by the writing task's context).
            context = self._context = contextvars.copy_context()
            # The hook's transport made once here, not by the first follows together (they would wait on its
            # lock, which then keeps a deque of waiters); a failure is the follows' to report, as before.
            with contextlib.suppress(Exception):
                await self.hook.transport()
            failed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

            def deliver(item: WatchEvent | BaseException) -> None:
                if failed.done():
                    return
                if isinstance(item, BaseException):
                    failed.set_result(item)
                    return
                try:
                    context.run(self._on_pod, item.type, item.object)
                except Exception as err:
                    failed.set_result(err)

            async with hub.feed(
                self.hook,
                PODS,
                self.namespace,
                deliver,
                label_selector=self._selectors(),
                scope=self.kind.pod_watch_selectors,
            ):
                raise await failed
        except asyncio.CancelledError:
            if not self._stopping:
                raise
            if self._runner is not None:
                self._runner.uncancel()
        finally:
            try:
                await self._cancel_followers()
                if self._stopping:
                    await self._flush()
            finally:
                self._finished = True
                if self._finish_waiter is not None and not self._finish_waiter.done():
                    self._finish_waiter.set_result(None)

    async def stop(self) -> list[str]:
        """Stop following and read what each started pod wrote since its last emitted line.

        The chosen pods are listed once more, so pods never followed are read too: those whose watch events
        had not arrived yet, and all of them when :meth:`run` never got to start (a job that ended at once).
        Not when the followed pods are already as many as the job's status says are desired of the chosen
        replicas, each started or ended (:meth:`_all_tracked`): then a job's end costs no LIST.
        A pod whose log was read to its end, its container stopped (its stream ended with it), is not read
        again.
        These reads retry like every other (until the wait's deadline, see ``hooks.retry.retry_until``).
        Returns a note for each pod whose log could not be read to its end, and why (e.g. it was deleted).
        """
        if self._runner is None and not self._stopping:
            self._stopping = True
            await self._flush()
        elif self._runner is not None and not self._runner.done():
            self._stopping = True
            self._runner.cancel()
            if not self._finished:
                self._finish_waiter = asyncio.get_running_loop().create_future()
                await asyncio.shield(self._finish_waiter)
        return list(self._gaps)

    def _on_pod(self, type_: str, pod: dict[str, Any]) -> None:
        known = self._pods.get(pod["metadata"]["name"])
        if known is not None and (type_ == DELETED or _uid(pod) == known.uid):
            known.update(None if type_ == DELETED else pod)
        elif type_ != DELETED and self._admit(pod) and (state := self._track(pod)) is not None:
            _followed.setdefault(asyncio.get_running_loop(), set()).add(state)
            self._start(state)

    def _admit(self, pod: dict[str, Any]) -> bool:
        """Whether to follow a new pod; past the loop's stream limit, narrow to the deciding replica first."""
        if not self._narrowed and followed_pods() >= self._limit():
            self._narrow()
        return self._wanted(pod, self.kind.replica_of_pod(pod).replica_type)

    def _limit(self) -> int:
        return self.max_streams if self.max_streams is not None else default_stream_limit()

    def _narrow(self) -> None:
        """Follow only the deciding replica from now on (read from the job as the hub has it; without it,
        the kind's master-role pods), and say so if that is fewer replicas than before."""
        self._narrowed = True
        job = self._cached_job()
        deciding = self.kind.deciding_replica(job) if job is not None else None
        chosen = self.replicas
        if deciding and not isinstance(chosen, str) and [r.lower() for r in chosen] == [deciding.lower()]:
            return  # it follows just that one already
        self.replicas = [deciding] if deciding else "master"
        which = f"the {deciding} replica" if deciding else "the master-role pods"
        self.note(
            f"This triggerer follows {followed_pods()} replica logs, its limit (max_log_streams="
            f"{self._limit()}): streaming only {which} of {self.kind.kind} {self.namespace}/{self.job_name}"
        )

    def _cached_job(self) -> dict[str, Any] | None:
        """The job as a running watch of the hub last saw it (``None``: not watched, or not seen yet)."""
        hub = self.hub or WatchHub.shared()
        return hub.cached(self.hook, self.kind.resource, self.namespace, self.job_name)

    def _track(self, pod: dict[str, Any]) -> _Pod | None:
        """Start keeping state for a chosen replica pod (a new one, or a new incarnation of a name)."""
        name = pod["metadata"]["name"]
        if not self.kind.owns_pod(self.job_name, pod):
            return None  # selected, but another job's (its labels do not name the job)
        replica = self.kind.replica_of_pod(pod)
        if not self._wanted(pod, replica.replica_type):
            return None
        container = container_name(pod, self.kind.default_container)
        resumed = self.resume.get(_uid(pod) or name)
        state = _Pod(self, name, replica, container, pod, self.tail_lines, resumed)
        known = self._pods.get(name)
        if known is not None:  # deleted and created again under the same name (operators recreate pods)
            known.update(None)
            self._replaced.append(known)
            state.tail = known.tail  # one tail per replica pod name, across incarnations
        self._pods[name] = state
        return state

    async def _cancel_followers(self) -> None:
        """Cancel the follows and wait for them to end, at most :data:`FOLLOW_STOP_SECONDS`: one that has
        not ended by then is left behind with a warning, so stopping never waits on a follow forever."""
        pods = list(self._pods.values())
        for pod in pods:  # no stream wakes its follow from now on
            if pod.stream is not None:
                pod.stream.close()
        following = {pod.task: pod for pod in pods if pod.task is not None and not pod.task.done()}
        for task in following:
            task.cancel()
        if following:
            _, stuck = await asyncio.wait(set(following), timeout=FOLLOW_STOP_SECONDS)
            for task in stuck:
                label = following[task].label
                log.warning("The log follow of %s did not end when stopped; left behind", label)
                self._gaps.append(
                    f"the log follow of {label} did not end within {FOLLOW_STOP_SECONDS:g} s of being "
                    "stopped; its last lines may be missing"
                )
        for pod in pods:
            self._end(pod)

    async def _choose(self) -> None:
        """Once: turn ``deciding`` into the job's deciding replica type; say which replicas are followed."""
        if self._chosen:
            return
        if self.replicas in ("deciding", "master"):
            # The job as the hub has it (a trigger's waiter watches it), else one read: a triggerer starting
            # 1,000 deferred jobs would otherwise send 1,000 GETs for what its job watch already holds.
            job = self._cached_job()
            if job is None:
                try:
                    job = await self.hook.get_job(self.kind, self.job_name, self.namespace)
                except Exception as err:  # unreadable now (a 403 says which permission): the master-role pods
                    self.note(f"Could not read the job to find its deciding replica: {err}")
            deciding = self.kind.deciding_replica(job) if job is not None else None
            self.replicas = [deciding] if deciding else "master"
            self._narrowed = True
        elif self._runner is not None and followed_pods() >= self._limit():
            self._narrow()  # the loop follows as many pods as it may: this job gets its deciding replica
        followed = {"all": "all replicas", "master": "the master-role pods"}.get(
            str(self.replicas), f"the {', '.join(self.replicas)} replicas"
        )
        self.note(f"Streaming the logs of {followed} of {self.kind.kind} {self.namespace}/{self.job_name}")
        self._chosen = True

    def _all_tracked(self) -> bool:
        """Whether a LIST of the job's pods could show :meth:`_flush` nothing new: the pods followed from the
        hub's pod events are as many as the job's status (as the hub holds it) says are desired of the chosen
        replica types, and each has started or ended (a pod last seen not started may have run since).
        Unknown, so ``False``: no job in the hub, the master-role pods (no replica types), a kind whose status
        is read from its children, or counts without a desired number (the waiter's ``_all_pods_seen``)."""
        if self.kind.status_needs_children or (isinstance(self.replicas, str) and self.replicas != "all"):
            return False
        job = self._cached_job()
        if job is None:
            return False
        types = None if self.replicas == "all" else list(self.replicas)
        desired = self.kind.status(job).desired_pods(types)
        if desired is None:
            return False
        chosen = None if types is None else {name.lower() for name in types}
        tracked = [
            pod
            for pod in self._pods.values()
            if not pod.deleted and (chosen is None or pod.replica_type.lower() in chosen)
        ]
        return len(tracked) >= desired and all(
            pod.has_run or pod.phase in _TERMINAL_PHASES for pod in tracked
        )

    async def _flush(self) -> None:
        await self._choose()
        listed: list[dict[str, Any]] = []  # none when every chosen pod is followed: no LIST per ending job
        if not self._all_tracked():
            master = self.replicas == "master"
            try:
                listed = await self.hook.list_job_pods(
                    self.kind, self.job_name, self.namespace, master=master
                )
            except Exception as err:  # read the pods known so far
                self._gaps.append(f"the job's pods could not be listed for the last log read: {err}")
        for pod in listed:
            known = self._pods.get(pod["metadata"]["name"])
            if known is not None and known.uid == _uid(pod):
                known.see(pod)
            else:
                self._track(pod)
        started = [
            pod for pod in self._pods.values() if pod.has_run and not pod.deleted and not pod.read_to_end
        ]
        await asyncio.gather(*(self._read(pod) for pod in started), return_exceptions=True)
        for state in [*self._replaced, *self._pods.values()]:
            if state.has_run and state.unread is not None:
                why = "the pod was deleted" if state.deleted else state.unread
                self._gaps.append(f"the rest of {state.label}'s log could not be read: {why}")

    # -- one pod ---------------------------------------------------------------------------------------------

    def _start(self, pod: _Pod) -> None:
        """Run the pod's follow in a task (again, when its silent stream has something), in :meth:`run`'s
        context: what it emits is the trigger's (a triggerer routes a record by the writing task's
        context)."""
        if pod.done or pod.task is not None:
            return
        context = self._context.copy() if self._context is not None else None
        pod.task = asyncio.get_running_loop().create_task(
            self._follow(pod), name=f"logs {pod.name}", context=context
        )

    def _end(self, pod: _Pod) -> None:
        """The pod's follow is over (ended, failed or cancelled): its stream closed, no longer counted."""
        pod.done = True
        if pod.stream is not None:
            pod.stream.close()
            pod.stream = None
        followed = _followed.get(asyncio.get_running_loop())
        if followed is not None:
            followed.discard(pod)

    async def _follow(self, pod: _Pod) -> None:
        """The pod's follow task: its log streamed while its container runs, read when it stopped, until the
        pod ends or goes. While its stream is open and silent there is no task: the task ends, and the stream
        starts the next one when it has lines, its end or an error (``LineStream.call_when_ready``)."""
        silent = False
        try:
            while True:
                if pod.stream is not None:
                    if await self._stream(pod):
                        silent = True
                        return
                    await self._after_stream(pod)
                    continue
                if pod.deleted:
                    return
                pod.changed = False
                if not pod.has_run:
                    if pod.phase in _TERMINAL_PHASES:
                        return  # it ended without ever starting this container
                    await pod.wait_change()
                    continue
                await self._catch_up_restarts(pod, pod.restarts)
                if not pod.running:
                    if not pod.read_to_end:  # a stream that ended with the container read everything
                        await self._read(pod)
                    if pod.phase in _TERMINAL_PHASES:
                        return
                    await pod.wait_change()
                    continue
                if not await self._open(pod):
                    await self._after_stream(pod)
        except Exception as err:  # one pod's trouble must not end the others' streams
            self.note(f"Stopped streaming the logs of pod {pod.name}: {err}")  # the task log's, not ours
        finally:
            pod.task = None  # a finished task keeps its coroutine and context
            if not silent:
                self._end(pod)

    async def _catch_up_restarts(self, pod: _Pod, restarts: int) -> None:
        """Read the previous instance first when the container restarted since we last looked."""
        if restarts > (pod.restarts_read if pod.restarts_read is not None else 0):
            await self._read(pod, previous=True)
        pod.restarts_read = restarts

    async def _open(self, pod: _Pod) -> bool:
        """Open the pod's log stream from its cursor; ``False`` if it could not be, for now."""
        pod.session = pod.cursor.session()
        pod.said = False
        pod.unread = "its log stream was interrupted"
        try:
            pod.stream = await self.hook.open_log(
                self.namespace, pod.name, pod.container, since_time=pod.cursor.since(), timestamps=True
            )
        except Exception as err:
            self._interrupted(pod, err)
            return False
        return True

    async def _stream(self, pod: _Pod) -> bool:
        """Emit the lines the pod's open stream has; ``True`` once it has no more for now (the stream calls
        :meth:`_start` when it has), ``False`` when it ended (the container did) or broke."""
        stream, fresh = pod.stream, pod.session
        assert stream is not None and fresh is not None
        step = _Steps()  # a backlog's next lines come without a suspension
        try:
            while True:
                lines = await stream.lines()
                if lines is None:
                    break
                for line in lines:
                    key, text = split_stamp(line.decode("utf-8", errors="replace"))
                    if fresh(key):
                        self._emit(pod, text, key)
                        pod.said = True
                    await step.pause()
        except Exception as err:
            self._close_stream(pod)
            self._interrupted(pod, err)
            return False
        except BaseException:
            self._close_stream(pod)
            raise
        self._close_stream(pod)
        pod.unread = None  # the stream ended with the container: everything it wrote was read
        return False

    def _close_stream(self, pod: _Pod) -> None:
        if pod.stream is not None:
            pod.stream.close()
            pod.stream = None
        pod.session = None

    def _interrupted(self, pod: _Pod, err: Exception) -> None:
        """A stream that could not be opened or broke: resumed later, unless the error says never."""
        pod.unread = _unreadable(err)
        if not _retry_later(err):
            raise err
        log.debug("Log stream of pod %s interrupted (%s); resuming", pod.name, err)

    async def _after_stream(self, pod: _Pod) -> None:
        """After a stream. One that ended with its container (nothing unread) usually ends before the
        kubelet reports the container's end: the pod watch brings that (or a restart, or the pod's
        deletion), so the pod is neither read nor followed again meanwhile. Only when the watch brings no
        change within ``retry_interval``, or the stream broke, is the pod read again (gone, or another
        incarnation: deleted); a running pod whose stream said nothing is not followed again before
        ``retry_interval`` (or a change)."""
        if pod.unread is None and not pod.deleted:
            if pod.running:
                pod.changed = False  # a change seen before the end is in what it says: still running
                await pod.wait_change(self.retry_interval)
            if pod.changed or not pod.running:
                return
        try:
            fresh = await self.hook.get_pod(self.namespace, pod.name)
        except Exception as err:
            if not is_transient(err):
                raise
            await pod.wait_change(self.retry_interval)
            return
        if fresh is not None and _uid(fresh) == pod.uid:
            pod.see(fresh)  # its own read: not a change to wake for
        else:
            pod.update(None)
        running = fresh is not None and (fresh.get("status") or {}).get("phase") == "Running"
        if not pod.said and running:
            pod.changed = False
            await pod.wait_change(self.retry_interval)  # nothing new: do not spin on a quiet one

    async def _read(self, pod: _Pod, *, previous: bool = False) -> None:
        fresh = pod.cursor.session()
        try:
            text = await self.hook.read_log(
                self.namespace,
                pod.name,
                pod.container,
                since_time=pod.cursor.since(),
                previous=previous,
                timestamps=True,
            )
        except Exception as err:
            # After a follow that ended with the container (unread None) nothing is missing: a failed extra
            # read, e.g. a 400 once the name belongs to the pod's next incarnation, loses no line.
            if pod.unread is not None:
                pod.unread = _unreadable(err)
            if not _retry_later(err):
                raise
            return
        if not previous:
            pod.unread = None
        step = _Steps()
        for line in _lines(text):
            key, body = split_stamp(line)
            if fresh(key):
                self._emit(pod, body, key)
            await step.pause()

    def _emit(self, pod: _Pod, text: str, key: int | None = None) -> None:
        pod.add_to_tail(text)
        self.emitted += 1
        mark = REPEAT_MARK if key is not None and self.mark_until and key <= self.mark_until else ""
        if self.pod_times and key is not None:
            self.emit(pod.prefix + mark + text, timestamp=stamp_text(key))
        else:
            self.emit(pod.prefix + mark + text)


class _Steps:
    """Ends the current step of the event loop once it has run ``STEP_SECONDS``."""

    __slots__ = ("began",)

    def __init__(self) -> None:
        self.began = time.perf_counter()

    async def pause(self) -> None:
        if time.perf_counter() - self.began >= STEP_SECONDS:
            await asyncio.sleep(0)
            self.began = time.perf_counter()


def _lines(text: str) -> Iterator[str]:
    """``text.splitlines()``, split a piece of about ``PIECE_CHARS`` at a time (not all in one step)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + PIECE_CHARS)
        end = len(text) if end < 0 else end + 1
        yield from text[start:end].splitlines()
        start = end


def replica_label(replica: ReplicaPod) -> str:
    """How a replica's log lines are prefixed: ``worker-0``; replicas without an index (pods of a ReplicaSet
    or batch Job) are told apart by their pod names: ``<type> <pod name>``."""
    return replica.replica_type.lower() + (
        f" {replica.name}" if replica.index is None else f"-{replica.index}"
    )


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _retry_later(err: BaseException) -> bool:
    """Errors after which a pod's log may be read later: not started (400), gone (404), transient."""
    if isinstance(err, KubeApiError) and err.status in (400, 404):
        return True
    return is_transient(err)


def _unreadable(err: BaseException) -> str:
    """Why a log read failed, for the note on what could not be read."""
    if isinstance(err, KubeApiError) and err.status == 404:
        return "the pod was deleted"
    return str(err) or type(err).__name__


def _uid(pod: Mapping[str, Any]) -> str | None:
    return (pod.get("metadata") or {}).get("uid")


def container_name(pod: Mapping[str, Any], default: str) -> str:
    """The container whose log is read: the kind's default container, else the pod's first."""
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    return default if default in names or not names else str(names[0])
