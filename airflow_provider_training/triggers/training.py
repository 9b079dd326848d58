"""``TrainingJobTrigger``: waits for any training job kind to reach a target state, in the triggerer.

Its single event's payload is a :class:`~airflow_provider_training.outcome.WaitEvent`'s
(:meth:`~airflow_provider_training.outcome.WaitEvent.to_payload`; its shape is documented there).

The waiting itself is :class:`airflow_provider_training.waiting.JobWaiter`, the same code sync mode runs
(:meth:`TrainingJobTrigger.waiter` builds it for both).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.triggers.base import BaseTrigger, TaskSuccessEvent, TriggerEvent

from airflow_provider_training.job_wait import JobWait
from airflow_provider_training.offloop import import_off_loop
from airflow_provider_training.outcome import Outcome, WaitEvent

# What run() and on_kill() use: imported in a thread before they first need it (seconds for the Kubernetes
# client), not on the triggerer's loop; this module itself stays cheap to import (the triggerer imports it
# on the loop).
RUNTIME_MODULES = (
    "h2.connection",  # imported by httpcore at a first HTTP/2 connection (httpcore by httpx at a client)
    "httpcore",
    "httpx",
    "airflow_provider_training.completion",
    "airflow_provider_training.hooks.training",
    "airflow_provider_training.jobs",
    "airflow_provider_training.kinds.registry",
    "airflow_provider_training.logs",
    "airflow_provider_training.triggers.log_position",
    "airflow_provider_training.waiting",
    "airflow_provider_training.watch",
)

# A task instance in one of these ended for good: its trigger outlived it.
FINISHED_TI_STATES = ("success", "failed", "skipped", "upstream_failed", "removed")

T = TypeVar("T")

if TYPE_CHECKING:
    from airflow._shared.logging.types import Logger

    from airflow_provider_training.hooks.training import AsyncTrainingJobHook
    from airflow_provider_training.kinds.base import JobKind
    from airflow_provider_training.triggers.log_position import LogPosition
    from airflow_provider_training.waiting import JobWaiter, Log


class TrainingJobTrigger(BaseTrigger):
    """Follow one training job until it reaches its target state, fails, is deleted or runs out of time.

    :param job_wait: what to wait for, a :class:`~airflow_provider_training.job_wait.JobWait` (or its
        ``to_dict()``, as serialized): the job, the connection, the wait options (``wait``: target state,
        deadline, startup timeout, logs, ``max_restarts``...) and the finish options (``finish``:
        ``on_finish_action``, ``on_kill_action``, ``end_from_trigger``...).
    :param earlier: without ``job_wait``, the flat keyword arguments of earlier versions (``kind``,
        ``api_version``, ``job_name``, ``namespace``, ``uid``, ``target_state``, ``check_interval``...,
        :meth:`JobWait.from_earlier_kwargs`): triggers those versions serialized load as they were.

    With ``finish.end_from_trigger``, a success ends the task here (``TaskSuccessEvent``) instead of resuming
    it on a worker: :func:`~airflow_provider_training.completion.end_task` pushes the result and applies
    ``on_finish_action`` as the worker would. Failures always resume the worker.

    With ``get_logs`` in a triggerer, the replica log position is saved in the task instance's XCom
    ``training_log_position`` (see :mod:`~airflow_provider_training.triggers.log_position`), so a trigger
    restarted by another triggerer goes on after the last emitted line.

    ``cleanup()`` is left as the base no-op on purpose: it also runs when the triggerer restarts, and must
    never delete the job.
    """

    def __init__(self, job_wait: JobWait | dict[str, Any] | None = None, **earlier: Any):
        super().__init__()
        self.job_wait = JobWait.from_kwargs(
            earlier if job_wait is None else {**earlier, "job_wait": job_wait}
        )

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {"job_wait": self.job_wait.to_dict()}

    @property
    def log(self) -> Logger:
        """The class's one logger, unless this trigger was given its own (``_log``). A logger per trigger is
        1 KiB of a triggerer's memory per deferred task, and tells the records apart no better: the
        triggerer sends a record to its task's log by the context it is logged in (the trigger's task binds
        ``trigger_id`` and the task instance), not by the logger."""
        return self._log if self._log is not None else type(self).logger()

    def _job_kind(self) -> JobKind:
        from airflow_provider_training.kinds.registry import get_kind

        return get_kind(self.job_wait.job.kind, self.job_wait.job.api_version)

    def _hook(self) -> AsyncTrainingJobHook:
        from airflow_provider_training.hooks.training import AsyncTrainingJobHook

        return AsyncTrainingJobHook(self.job_wait.kubernetes_conn_id)

    def waiter(
        self,
        hook: AsyncTrainingJobHook,
        log: Log,
        *,
        log_resume: dict[str, Any] | None = None,
        log_mark_until: int | None = None,
    ) -> JobWaiter:
        """The :class:`~airflow_provider_training.waiting.JobWaiter` this trigger runs, on ``hook``; the sync
        mode runs the same one on the worker's hook, logging to the task's log."""
        from airflow_provider_training.waiting import JobWaiter

        job = self.job_wait.job
        options = replace(
            self.job_wait.wait, uid=job.uid, log_resume=log_resume, log_mark_until=log_mark_until
        )
        return JobWaiter(hook, self._job_kind(), job.name, job.namespace, options, log)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await import_off_loop(*RUNTIME_MODULES)
        position = self._log_position()
        resume, mark_until = await position.load() if position is not None else (None, None)
        if (orphaned := await self._killed_while_away()) is not None:
            yield TriggerEvent(orphaned.to_payload())
            return
        hook = self._hook()
        waiter = self.waiter(hook, self.log, log_resume=resume, log_mark_until=mark_until)
        saver = (
            asyncio.create_task(position.keep(waiter.log_cursors, waiter.log_tails))
            if position is not None
            else None
        )
        try:
            event = await waiter.wait()
            if self._ends_task(event):
                yield await self._success(hook, event)
                return
        finally:
            if saver is not None and position is not None:
                saver.cancel()
                await asyncio.gather(saver, return_exceptions=True)
                await position.save_final(waiter.log_cursors(), waiter.log_tails())
            await hook.close()
        yield TriggerEvent(event.to_payload())

    def _log_position(self) -> LogPosition | None:
        """Where this try's replica logs stopped, saved in its XCom; only in a triggerer (which sets
        ``task_instance``), never in the sync mode or ``dag.test()`` (which run the trigger inline)."""
        if not self.job_wait.wait.get_logs or self.task_instance is None:
            return None
        from airflow_provider_training.triggers.log_position import LogPosition

        return LogPosition(self.task_instance, self.log)

    def _ends_task(self, event: WaitEvent) -> bool:
        """Whether this success ends the task here (``end_from_trigger``, in a triggerer)."""
        return self.job_wait.finish.end_from_trigger and self.task_instance is not None and event.succeeded

    async def _success(self, hook: AsyncTrainingJobHook, event: WaitEvent) -> TriggerEvent:
        """End the task here (:func:`~airflow_provider_training.completion.end_task`), or resume it on a
        worker with the event when that cannot be done here.

        The result is pushed through the Task SDK (``XCom.aset``), as a worker pushes it: the
        ``TaskSuccessEvent(xcoms=...)`` route stores it JSON-encoded a second time (``XComModel.set``), so
        downstream tasks would pull a string."""
        from airflow.sdk.execution_time.xcom import XCom

        from airflow_provider_training.completion import end_task
        from airflow_provider_training.triggers.log_position import SAVE_TIMEOUT, xcom_address

        async def push(xcoms: dict[str, Any]) -> None:
            address = xcom_address(self.task_instance)
            for key, value in xcoms.items():
                await asyncio.wait_for(XCom.aset(key=key, value=value, **address), SAVE_TIMEOUT)

        if await end_task(hook, event, self.job_wait.finish, self.log, push):
            return TaskSuccessEvent()
        return TriggerEvent(event.to_payload())

    async def on_kill(self) -> None:
        """The triggerer cancelled this trigger as a user's action: delete the job and its cleanup children,
        unless ``keep`` or the evidence says no kill of a running try happened (:meth:`_kill_job`).

        The triggerer repeats its cancellation every loop until the trigger has ended, and cancels it again
        when it shuts down: the delete runs to its end regardless, within ``[triggerer] on_kill_timeout``.
        """

        async def kill() -> None:
            await self._kill_job(await task_instance_state(self.task_instance))

        await run_to_end(kill(), on_kill_budget())

    async def _kill_job(self, state: str | None) -> bool:
        """Delete the job as a kill does, unless ``keep`` or :meth:`_spared` finds why not; ``state`` is the
        task instance's (``None``: unknown). Logs one line saying who decided; returns whether a delete was
        sent."""
        if self.job_wait.finish.on_kill_action != "delete":
            self.log.info("Keeping %s (on_kill_action='keep')", self.job_wait.label)
            return False
        await import_off_loop(*RUNTIME_MODULES)
        from airflow_provider_training.jobs import delete_job

        hook = self._hook()
        try:
            if (why := await self._spared(hook, state)) is not None:
                self.log.info("Deleting nothing: %s", why)
                return False
            who = (
                "the triggerer cancelled this trigger as a user's action"
                if state is None
                else f"the task instance is {state}, no longer deferred: a user or Airflow ended its try"
            )
            self.log.info("Deleting %s (on_kill_action='delete'): %s", self.job_wait.label, who)
            job = self.job_wait.job
            deleted = await delete_job(hook, self._job_kind(), job.name, job.namespace, uid=job.uid)
            self.log.info(
                "%s %s",
                self.job_wait.label,
                "deleted" if deleted else "was already gone (or is another try's job now)",
            )
            return True
        finally:
            await hook.close()

    async def _spared(self, hook: AsyncTrainingJobHook, state: str | None) -> str | None:
        """Why a kill must not delete the job, from the evidence; ``None``: delete it.

        * the task instance (as the triggerer loaded it) is at another try than the one that deferred here:
          that try decides about the job (a cleared task's next try replaces the killed try's job itself);
        * the task instance finished and the job has ended too: nothing is left to stop, and an ended job is
          ``on_finish_action``'s, which whoever finished the task applied. This is a trigger that outlived its
          task, e.g. one ``airflow dags test`` ran inline and left in the metadata DB;
        * the task instance succeeded and the job is in the state this trigger waited for (``Running``): the
          wait succeeded, and the job was meant to run on after the task.
        """
        current = getattr(self.task_instance, "try_number", None)
        waited_for, label = self.job_wait.try_number, self.job_wait.label
        if waited_for is not None and current is not None and current != waited_for:
            return (
                f"this trigger waited for try {waited_for}, and the task instance is at try {current} "
                f"now: that try decides about {label} (decided by this trigger from the try numbers)"
            )
        if state not in FINISHED_TI_STATES:
            return None
        from airflow_provider_training.reading import aread_status

        ref = self.job_wait.job
        job = await hook.get_job(self._job_kind(), ref.name, ref.namespace)
        if job is None or (ref.uid is not None and job["metadata"].get("uid") != ref.uid):
            return None  # the delete finds nothing of this try's to remove, and says so
        job_state = (await aread_status(hook, self._job_kind(), job)).state
        decided = "(decided by this trigger from the task instance's and the job's states)"
        if job_state.terminal:
            return (
                f"{label} already ended ({job_state.value}) and the task instance is {state}: no user "
                f"ended a running try, nothing is left to stop, and an ended job is on_finish_action's "
                f"('{self.job_wait.finish.on_finish_action}') {decided}"
            )
        if state == "success" and job_state == self.job_wait.wait.target:
            return (
                f"{label} is {job_state.value}, the state this trigger waited for, and the task "
                f"instance is success: the wait ended as it should, and the job runs on as the task meant it "
                f"to {decided}"
            )
        return None

    async def _killed_while_away(self) -> WaitEvent | None:
        """Whether the task instance this trigger serves was acted on while no triggerer ran.

        A triggerer that starts finds the trigger of a task marked failed or success (or cleared) in the
        meantime and runs it once before Airflow cancels it; Airflow's own ``on_kill()`` then races with
        the start. The trigger asks the Task SDK for its task instance's state first: anything but
        ``deferred`` ends the trigger, the job going as ``on_kill()`` would remove it (:meth:`_kill_job`:
        not when the task finished with its job, or moved on to another try). A restart or a
        redistribution of a still-deferred task finds it deferred and waits as usual.
        """
        state = await task_instance_state(self.task_instance)
        if state is None or state == "deferred":
            return None
        self.log.info("The task instance is %s, no longer deferred: this trigger ends here", state)
        deleted = await run_to_end(self._kill_job(state), on_kill_budget())
        job = self.job_wait.job
        message = f"The task instance is {state}, no longer deferred; the trigger ended" + (
            "" if deleted else " without deleting the job"
        )
        return WaitEvent(Outcome.ERROR, job, message)


def on_kill_budget() -> float:
    """Seconds ``on_kill()`` may take: ``[triggerer] on_kill_timeout`` less a margin to log the outcome."""
    from airflow.sdk.configuration import conf

    return max(1.0, conf.getfloat("triggerer", "on_kill_timeout", fallback=30.0) - 1.0)


async def run_to_end(work: Coroutine[Any, Any, T], budget: float) -> T:
    """Await ``work`` to its end even when the awaiting task is cancelled meanwhile, for ``budget`` seconds
    at most (then ``work`` is cancelled and :class:`TimeoutError` raised)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    end = loop.time() + budget
    while not task.done():
        remaining = end - loop.time()
        if remaining <= 0:
            task.cancel()
            raise TimeoutError(f"gave up after {budget:.0f} s")
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), remaining)
    return task.result()


async def task_instance_state(ti: Any) -> str | None:
    """The current state of ``ti`` (a trigger's ``task_instance``) through the Task SDK's supervisor
    comms; ``None`` outside a triggerer (inline runs) or when the state cannot be read or is not found."""
    if ti is None:
        return None
    from airflow.sdk.execution_time.comms import GetTaskStates

    from airflow_provider_training.hooks.connection import supervisor_comms

    comms, answers_async = supervisor_comms()
    if not answers_async:
        return None
    map_index = ti.map_index if ti.map_index is not None and ti.map_index >= 0 else None
    request = GetTaskStates(dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=map_index)
    try:
        states = (await comms.asend(request)).task_states
    except Exception:  # a failed check must never end a wait: the trigger waits as usual
        return None
    key = f"{ti.task_id}_{map_index}" if map_index is not None else ti.task_id
    state = (states.get(ti.run_id) or {}).get(key)
    return str(getattr(state, "value", state)) if state is not None else None
