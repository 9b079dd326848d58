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
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.triggers.base import BaseTrigger, TaskSuccessEvent, TriggerEvent

from airflow_provider_training.kinds.base import JobState, parse_time
from airflow_provider_training.offloop import import_off_loop
from airflow_provider_training.outcome import JobRef, Outcome, WaitEvent
from airflow_provider_training.params import (
    DECIDING,
    ON_FINISH_ACTIONS,
    ON_KILL_ACTIONS,
    TARGET_STATES,
    check_choice,
    check_max_log_streams,
    check_max_restarts,
    check_seconds,
)

# What run() and on_kill() use: imported in a thread before they first need it (seconds for the Kubernetes
# client), not on the triggerer's loop; this module itself stays cheap to import (the triggerer imports it
# on the loop).
RUNTIME_MODULES = (
    "h2.connection",  # imported by httpcore at a first HTTP/2 connection (httpcore by httpx at a client)
    "httpcore",
    "httpx",
    "airflow_provider_training.decorators.shipping",
    "airflow_provider_training.hooks.training",
    "airflow_provider_training.kinds.registry",
    "airflow_provider_training.logs",
    "airflow_provider_training.results",
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
    """Follow one training job until it reaches ``target_state``, fails, is deleted or runs out of time.

    :param kind: kind name, e.g. ``PyTorchJob``; with ``api_version`` it names a registered JobKind.
    :param job_name: the job's name. :param namespace: its namespace.
    :param uid: the uid of the object waited for; a same-named object with another uid counts as deleted.
    :param target_state: ``Succeeded`` or ``Running``.
    :param get_logs: stream replica logs into this trigger's log.
    :param log_replicas: ``deciding`` (the replica type that decides the job; ``master`` is its old name),
        ``all`` or a list of replica types.
    :param max_log_streams: how many replica pods this triggerer follows live at once (default: half its
        open-file limit); past it, a job that follows more than its deciding replica follows only that one,
        saying so in its log.
    :param deadline: absolute ISO-8601 time at which the wait ends with ``timeout``.
    :param startup_timeout: seconds after creation (or resumption) within which a replica pod must start.
    :param status_grace_period: seconds an empty status is tolerated before the wait reports an error.
    :param check_interval: the longest time between the time-based checks (the deadline, the startup
        timeout); watch events arrive at once. ``poll_interval`` is its name in earlier versions, still
        accepted so that their serialized triggers load.
    :param allow_missing: keep waiting while the job does not exist yet (sensors).
    :param max_restarts: end the wait as failed once a replica that keeps failing restarted more than this
        many times (its pod's restarts, and those of the pods the operator replaced under its name);
        ``None`` (default): no limit.
    :param on_kill_action: what ``on_kill()`` (a user acted on the deferred task) does with the job:
        ``delete`` it (and its cleanup children) or ``keep`` it.
    :param try_number: the try that deferred on this trigger; a kill seen after the task instance moved on to
        another try deletes nothing (``None``, from triggers serialized before it: not checked).
    :param end_from_trigger: on success, end the task from the triggerer (``TaskSuccessEvent``) instead of
        resuming it on a worker: apply ``on_finish_action``, log the final line and push the result as the
        ``return_value`` XCom (when ``push_result``). Failures always resume the worker.
    :param on_finish_action: ``keep``, ``delete`` or ``delete_succeeded``, applied when ending the task here.
    :param push_result: push the result XCom when ending the task here (the operator's ``do_xcom_push``).
    :param return_value_from_log: the result pushed when ending the task here is the return value the
        deciding replica logged (``@task.pytorch_job`` and ``@task.train_job``, see
        :mod:`~airflow_provider_training.decorators.shipping`), read before the result is pushed and the job
        deleted (``on_finish_action``);
        without that line the task resumes on a worker, which reports it.
    :param multiple_outputs: when ending the task here, also push each key of the result as an XCom (the
        operator's ``multiple_outputs``), as a worker does.

    With ``get_logs`` in a triggerer, the replica log position is saved in the task instance's XCom
    ``training_log_position`` (see :mod:`~airflow_provider_training.triggers.log_position`), so a trigger
    restarted by another triggerer goes on after the last emitted line.

    ``cleanup()`` is left as the base no-op on purpose: it also runs when the triggerer restarts, and must
    never delete the job.
    """

    def __init__(
        self,
        *,
        kind: str,
        api_version: str,
        job_name: str,
        namespace: str,
        uid: str | None = None,
        kubernetes_conn_id: str | None = "kubernetes_default",
        target_state: str = JobState.SUCCEEDED.value,
        get_logs: bool = True,
        log_replicas: str | list[str] = DECIDING,
        max_log_streams: int | None = None,
        deadline: str | None = None,
        startup_timeout: float | None = None,
        status_grace_period: float = 60.0,
        check_interval: float = 5.0,
        allow_missing: bool = False,
        on_kill_action: str = "delete",
        end_from_trigger: bool = False,
        on_finish_action: str = "keep",
        push_result: bool = True,
        return_value_from_log: bool = False,
        multiple_outputs: bool = False,
        max_restarts: int | None = None,
        poll_interval: float | None = None,  # check_interval's name in triggers serialized before
        try_number: int | None = None,
    ):
        super().__init__()
        self.kind = kind
        self.api_version = api_version
        self.job_name = job_name
        self.namespace = namespace
        self.uid = uid
        self.kubernetes_conn_id = kubernetes_conn_id
        self.target_state = check_choice("target_state", target_state, TARGET_STATES)
        self.get_logs = get_logs
        self.log_replicas = log_replicas
        self.max_log_streams = check_max_log_streams(max_log_streams)
        self.deadline = deadline
        self.startup_timeout = startup_timeout
        self.status_grace_period = status_grace_period
        self.check_interval = check_seconds(
            "check_interval", check_interval if poll_interval is None else poll_interval
        )
        self.allow_missing = allow_missing
        self.on_kill_action = check_choice("on_kill_action", on_kill_action, ON_KILL_ACTIONS)
        self.end_from_trigger = end_from_trigger
        self.on_finish_action = check_choice("on_finish_action", on_finish_action, ON_FINISH_ACTIONS)
        self.push_result = push_result
        self.return_value_from_log = return_value_from_log
        self.multiple_outputs = multiple_outputs
        self.try_number = try_number
        self.max_restarts = check_max_restarts(max_restarts)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "kind": self.kind,
                "api_version": self.api_version,
                "job_name": self.job_name,
                "namespace": self.namespace,
                "uid": self.uid,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "target_state": self.target_state,
                "get_logs": self.get_logs,
                "log_replicas": self.log_replicas,
                "max_log_streams": self.max_log_streams,
                "deadline": self.deadline,
                "startup_timeout": self.startup_timeout,
                "status_grace_period": self.status_grace_period,
                "check_interval": self.check_interval,
                "allow_missing": self.allow_missing,
                "on_kill_action": self.on_kill_action,
                "end_from_trigger": self.end_from_trigger,
                "on_finish_action": self.on_finish_action,
                "push_result": self.push_result,
                "return_value_from_log": self.return_value_from_log,
                "multiple_outputs": self.multiple_outputs,
                "try_number": self.try_number,
                "max_restarts": self.max_restarts,
            },
        )

    @property
    def log(self) -> Logger:
        """The class's one logger, unless this trigger was given its own (``_log``). A logger per trigger is
        1 KiB of a triggerer's memory per deferred task, and tells the records apart no better: the
        triggerer sends a record to its task's log by the context it is logged in (the trigger's task binds
        ``trigger_id`` and the task instance), not by the logger."""
        return self._log if self._log is not None else type(self).logger()

    def _job_kind(self) -> JobKind:
        from airflow_provider_training.kinds.registry import get_kind

        return get_kind(self.kind, self.api_version)

    def _hook(self) -> AsyncTrainingJobHook:
        from airflow_provider_training.hooks.training import AsyncTrainingJobHook

        return AsyncTrainingJobHook(self.kubernetes_conn_id)

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
        from airflow_provider_training.waiting import JobWaiter, WaitOptions

        options = WaitOptions(
            target=JobState(self.target_state),
            deadline=parse_time(self.deadline),
            startup_timeout=self.startup_timeout,
            status_grace_period=self.status_grace_period,
            check_interval=self.check_interval,
            get_logs=self.get_logs,
            log_replicas=self.log_replicas,
            max_log_streams=self.max_log_streams,
            uid=self.uid,
            allow_missing=self.allow_missing,
            log_resume=log_resume,
            log_mark_until=log_mark_until,
            max_restarts=self.max_restarts,
        )
        return JobWaiter(hook, self._job_kind(), self.job_name, self.namespace, options, log)

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
        if not self.get_logs or self.task_instance is None:
            return None
        from airflow_provider_training.triggers.log_position import LogPosition

        return LogPosition(self.task_instance, self.log)

    def _ends_task(self, event: WaitEvent) -> bool:
        """Whether this success ends the task here (``end_from_trigger``, in a triggerer)."""
        return self.end_from_trigger and self.task_instance is not None and event.succeeded

    async def _success(self, hook: AsyncTrainingJobHook, event: WaitEvent) -> TriggerEvent:
        """What the operator's ``execute_complete`` does on success, so no worker has to resume: the XCom
        result (the deciding replica's return value with ``return_value_from_log``), the
        ``on_finish_action`` delete and the final log line.

        The result is pushed through the Task SDK (``XCom.aset``), as a worker pushes it: the
        ``TaskSuccessEvent(xcoms=...)`` route stores it JSON-encoded a second time (``XComModel.set``), so
        downstream tasks would pull a string. If the push fails, the task resumes on a worker instead, the job
        not yet deleted."""
        from airflow.sdk.execution_time.xcom import XCom

        from airflow_provider_training.results import build_result, finish_deletion, result_line
        from airflow_provider_training.triggers.log_position import SAVE_TIMEOUT, xcom_address

        result: Any = build_result(event)
        summary = result_line(result)
        if self.return_value_from_log and event.job is not None:
            from airflow_provider_training.decorators.shipping import ReturnValueMissing, read_return_value

            try:
                result = await read_return_value(hook, event.job)  # before the job (and its pods) may go
            except ReturnValueMissing:
                return TriggerEvent(event.to_payload())
        if self.push_result:
            address = xcom_address(self.task_instance)
            try:
                for key, value in xcoms_of(result, self.multiple_outputs).items():
                    await asyncio.wait_for(XCom.aset(key=key, value=value, **address), SAVE_TIMEOUT)
            except Exception as err:
                self.log.warning(
                    "Could not push the result (%s: %s); resuming the task", type(err).__name__, err
                )
                return TriggerEvent(event.to_payload())  # the job is still there for the worker
        if why := finish_deletion(event, self.on_finish_action):
            self.log.info("Deleting %s %s/%s (%s)", self.kind, self.namespace, self.job_name, why)
            await hook.delete_job(self._job_kind(), self.job_name, self.namespace, uid=self.uid)
        self.log.info(summary)
        return TaskSuccessEvent()

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
        if self.on_kill_action != "delete":
            self.log.info(
                "Keeping %s %s/%s (on_kill_action='keep')", self.kind, self.namespace, self.job_name
            )
            return False
        await import_off_loop(*RUNTIME_MODULES)
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
            self.log.info("Deleting %s (on_kill_action='delete'): %s", self._label, who)
            deleted = await hook.delete_job(self._job_kind(), self.job_name, self.namespace, uid=self.uid)
            self.log.info(
                "%s %s",
                self._label,
                "deleted" if deleted else "was already gone (or is another try's job now)",
            )
            return True
        finally:
            await hook.close()

    @property
    def _label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.job_name}"

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
        if self.try_number is not None and current is not None and current != self.try_number:
            return (
                f"this trigger waited for try {self.try_number}, and the task instance is at try {current} "
                f"now: that try decides about {self._label} (decided by this trigger from the try numbers)"
            )
        if state not in FINISHED_TI_STATES:
            return None
        from airflow_provider_training.reading import aread_status

        job = await hook.get_job(self._job_kind(), self.job_name, self.namespace)
        if job is None or (self.uid is not None and job["metadata"].get("uid") != self.uid):
            return None  # the delete finds nothing of this try's to remove, and says so
        job_state = (await aread_status(hook, self._job_kind(), job)).state
        decided = "(decided by this trigger from the task instance's and the job's states)"
        if job_state.terminal:
            return (
                f"{self._label} already ended ({job_state.value}) and the task instance is {state}: no user "
                f"ended a running try, nothing is left to stop, and an ended job is on_finish_action's "
                f"('{self.on_finish_action}') {decided}"
            )
        if state == "success" and job_state.value == self.target_state:
            return (
                f"{self._label} is {job_state.value}, the state this trigger waited for, and the task "
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
        job = JobRef(self.job_name, self.namespace, self.uid, self.kind, self.api_version)
        message = f"The task instance is {state}, no longer deferred; the trigger ended" + (
            "" if deleted else " without deleting the job"
        )
        return WaitEvent(Outcome.ERROR, job, message)


def xcoms_of(result: Any, multiple_outputs: bool) -> dict[str, Any]:
    """The XComs a worker would push for ``result``: with ``multiple_outputs`` each key of the dict, then
    ``return_value``. A result that cannot have multiple outputs raises ``TypeError`` (a worker says why)."""
    if not multiple_outputs:
        return {"return_value": result}
    if not isinstance(result, dict) or not all(isinstance(key, str) for key in result):
        raise TypeError("multiple_outputs needs a dict with string keys")
    return {**result, "return_value": result}


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
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import GetTaskStates

    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None or not hasattr(comms, "asend"):
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
