"""Replica log streaming: follow every chosen replica pod of a job, each line prefixed ``[worker-0] ``.

Pods are discovered through the watch hub (one shared pod watch per namespace), so a pod is followed as soon
as its container has started. "All replicas" are the pods of the kind's pod selector and its extra selectors;
every selected pod must also pass the kind's ``owns_pod`` (some APIs put no job name on their pods).

Each pod is followed by a task of its own (``log_follow``), which resumes from the pod's cursor
(``log_cursor``) without loss or duplicates. Stopping cancels the follows, waits for them a bounded time, and
reads once more what each started pod wrote since its last emitted line.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import resource
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from airflow_provider_training.hooks.training import AsyncTrainingJobHook, replica_selectors
from airflow_provider_training.kinds.base import PODS, JobKind, ReplicaPod
from airflow_provider_training.kinds.selectors import parse_selector, selects
from airflow_provider_training.log_cursor import stamp_key, stamp_text
from airflow_provider_training.log_follow import TERMINAL_PHASES, FollowedPod, PodFollower, pod_uid
from airflow_provider_training.watch import DELETED, WatchEvent, WatchHub

log = logging.getLogger(__name__)

ReplicaChoice = Literal["deciding", "master", "all"] | Sequence[str]

REPEAT_MARK = "(may repeat) "  # a line a triggerer killed without notice may have emitted already
# What :meth:`ReplicaLogStreamer.saved_tails` keeps for the Training tab once pods are gone (bounded: it is
# saved with the log position).
SAVED_TAIL_PODS = 16
SAVED_LINE_CHARS = 500
# A read that brought many lines (a backlog) is logged as records of up to this many lines (one record is some
# 12 us of CPU, as many as the line's own work): a trickle of lines stays one record per line.
RECORD_LINES = 500
# How long stopping waits for the cancelled follows to end; one still running then is left behind (warned).
FOLLOW_STOP_SECONDS = 5.0

# The pods followed live on each event loop (one open log stream each, a socket and an API server
# connection), by every streamer of that loop: what ``max_streams`` counts.
_followed: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[FollowedPod]] = (
    weakref.WeakKeyDictionary()
)


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


class ReplicaLogStreamer:
    """Streams the logs of a job's chosen replicas to ``emit``, each line prefixed: the lines one read
    brought in one call, joined by newlines (a trickle: a line per call; a backlog: up to
    :data:`RECORD_LINES`).

    ``replicas``: ``"deciding"`` (alias ``"master"``: the job's :meth:`JobKind.deciding_replica`, read from
    the job once when streaming starts), ``"all"``, or a list of replica types.
    :meth:`run` follows pods as they appear until cancelled or :meth:`stop`-ped (which flushes what is left,
    and returns a note for each pod whose log could not be read to its end).
    :meth:`tail` keeps the last ``tail_lines`` lines of each pod for failure messages. ``note`` (default:
    ``emit``) gets the one line saying which replicas are followed.

    ``resume``: the :meth:`cursors` of an earlier streamer of the same job (a trigger before a triggerer
    restart): each pod goes on after its last emitted line. ``mark_until``: lines stamped at or before this
    key (ns) are marked as possibly repeated (the earlier streamer's cursors were not its last ones).
    ``pod_times``: ``emit`` is called with ``timestamp=`` the (first) line's own kubelet time, so the log
    record carries the time the replica wrote it.

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
        self.resume = dict(resume or {})
        self.mark_until = mark_until
        self.pod_times = pod_times
        self.max_streams = max_streams
        self.emitted = 0  # lines emitted so far: tells a persister whether the cursors moved
        self._pods: dict[str, FollowedPod] = {}
        self._replaced: list[FollowedPod] = []  # earlier incarnations of a pod name, not read to their end
        self._gaps: list[str] = []
        self._runner: asyncio.Task[Any] | None = None
        self._stopping = False
        self._finished = False
        self._finish_waiter: asyncio.Future[None] | None = None  # made by stop() only (an Event is 0.7 KiB)
        self._chosen = False
        self._narrowed = False  # following only the deciding replica (chosen so, or past max_streams)
        self.note = note or emit
        self._follower = PodFollower(
            hook, namespace, emit=self._emit, note=self.note, retry_interval=retry_interval
        )

    def tail(self, pod_name: str) -> list[str]:
        """The last lines seen from ``pod_name`` (without prefixes), oldest first."""
        pod = self._pods.get(pod_name)
        return list(pod.tail) if pod is not None else []

    def saved_tails(self) -> dict[str, dict[str, Any]]:
        """The last lines of the followed pods, bounded for saving (:data:`SAVED_TAIL_PODS` pods,
        ``tail_lines`` lines each cut at :data:`SAVED_LINE_CHARS` characters):
        ``{pod: {"replica", "lines"}}``."""
        return {
            name: {"replica": pod.label, "lines": [line[:SAVED_LINE_CHARS] for line in pod.tail]}
            for name, pod in list(self._pods.items())[:SAVED_TAIL_PODS]
            if pod.tail
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
            context = contextvars.copy_context()
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
        if known is not None and (type_ == DELETED or pod_uid(pod) == known.uid):
            known.update(None if type_ == DELETED else pod)
        elif type_ != DELETED and self._admit(pod) and (state := self._track(pod)) is not None:
            loop = asyncio.get_running_loop()
            _followed.setdefault(loop, set()).add(state)
            # In the context this is called in, run()'s: what the follow emits is the trigger's.
            state.task = loop.create_task(self._follow(state), name=f"logs {state.name}")

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

    def _track(self, pod: dict[str, Any]) -> FollowedPod | None:
        """Start keeping state for a chosen replica pod (a new one, or a new incarnation of a name)."""
        name = pod["metadata"]["name"]
        if not self.kind.owns_pod(self.job_name, pod):
            return None  # selected, but another job's (its labels do not name the job)
        replica = self.kind.replica_of_pod(pod)
        if not self._wanted(pod, replica.replica_type):
            return None
        container = container_name(pod, self.kind.default_container)
        resumed = self.resume.get(pod_uid(pod) or name)
        label = replica_label(replica)
        state = FollowedPod(name, replica.replica_type, label, container, pod, self.tail_lines, resumed)
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
        return len(tracked) >= desired and all(pod.has_run or pod.phase in TERMINAL_PHASES for pod in tracked)

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
            if known is not None and known.uid == pod_uid(pod):
                known.see(pod)
            else:
                self._track(pod)
        started = [
            pod for pod in self._pods.values() if pod.has_run and not pod.deleted and not pod.read_to_end
        ]
        await asyncio.gather(*(self._follower.read(pod) for pod in started), return_exceptions=True)
        for state in [*self._replaced, *self._pods.values()]:
            if state.has_run and state.unread is not None:
                why = "the pod was deleted" if state.deleted else state.unread
                self._gaps.append(f"the rest of {state.label}'s log could not be read: {why}")

    # -- one pod ---------------------------------------------------------------------------------------------

    async def _follow(self, pod: FollowedPod) -> None:
        try:
            await self._follower.follow(pod)
        finally:
            self._end(pod)

    def _end(self, pod: FollowedPod) -> None:
        """The pod's follow is over (ended, failed, cancelled or left behind): its stream closed, no longer
        counted."""
        pod.done = True
        pod.close_stream()
        followed = _followed.get(asyncio.get_running_loop())
        if followed is not None:
            followed.discard(pod)

    def _emit(self, pod: FollowedPod, lines: list[str]) -> None:
        """One read's new lines of ``pod`` (``"<timestamp> <text>"`` each): a record per
        :data:`RECORD_LINES` of them, each line prefixed; with ``pod_times`` a record has its first line's
        time."""
        self.emitted += len(lines)
        for start in range(0, len(lines), RECORD_LINES):
            stamped = lines[start : start + RECORD_LINES]
            texts = [line.partition(" ")[2] for line in stamped]
            pod.tail.extend(texts)
            key = stamp_key(stamped[0].partition(" ")[0])
            marked = self._marked(stamped) if key is not None and key <= (self.mark_until or 0) else 0
            message = "\n".join(
                [pod.prefix + REPEAT_MARK + text for text in texts[:marked]]
                + [pod.prefix + text for text in texts[marked:]]
            )
            if self.pod_times and key is not None:
                self.emit(message, timestamp=stamp_text(key))
            else:
                self.emit(message)

    def _marked(self, lines: list[str]) -> int:
        """How many of ``lines`` (in order) are stamped up to ``mark_until``: they may have been emitted."""
        for index, line in enumerate(lines):
            key = stamp_key(line.partition(" ")[0])
            if key is None or key > (self.mark_until or 0):
                return index
        return len(lines)


def replica_label(replica: ReplicaPod) -> str:
    """How a replica's log lines are prefixed: ``worker-0``; replicas without an index (pods of a ReplicaSet
    or batch Job) are told apart by their pod names: ``<type> <pod name>``."""
    return replica.replica_type.lower() + (
        f" {replica.name}" if replica.index is None else f"-{replica.index}"
    )


def container_name(pod: Mapping[str, Any], default: str) -> str:
    """The container whose log is read: the kind's default container, else the pod's first."""
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    return default if default in names or not names else str(names[0])
