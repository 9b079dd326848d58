"""The end of a finished wait, written once: the task's result (the job's summary, or the return value a
decorated function's deciding replica logged), the cleanup ``on_finish_action`` asks for, and the error a
failure raises.

The operator calls :func:`complete` (sync mode and ``execute_complete``, on the worker), the sensor
:func:`settled`, and the trigger :func:`end_task` when a deferred success ends the task in the triggerer, so
every path reads the same return value, deletes the same way and logs the same last line. The options it reads
are a :class:`~airflow_provider_training.job_wait.FinishOptions`.

The return value's protocol: the deciding replica prints one line starting with :data:`RESULT_MARKER` and the
JSON of the value (:mod:`~airflow_provider_training.decorators.shipping` writes the code that prints it).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from airflow_provider_training.kinds.base import JobState
from airflow_provider_training.outcome import JobRef, Outcome, WaitEvent
from airflow_provider_training.results import TrainingJobError, build_result, raise_for_event, result_line

if TYPE_CHECKING:
    from airflow_provider_training.hooks.training import AsyncTrainingJobHook
    from airflow_provider_training.job_wait import FinishOptions
    from airflow_provider_training.params import OnFinishAction
    from airflow_provider_training.waiting import Log

RESULT_MARKER = "::airflow-training-return-value::"


class ReturnValueMissing(ValueError):
    """The job succeeded but its deciding replica's log has no return-value line."""


def settled(event: WaitEvent, error_cls: type[TrainingJobError] = TrainingJobError) -> dict[str, Any]:
    """The result of a successful wait (the XCom return value); ``error_cls`` with the explanation
    otherwise."""
    raise_for_event(event, error_cls)
    return build_result(event)


async def complete(hook: AsyncTrainingJobHook, event: WaitEvent, finish: FinishOptions, log: Log) -> Any:
    """The worker's end of a wait: the result (with ``return_value_from_log``, the deciding replica's return
    value, read before the job may go), then the cleanup, then the error of a failed wait (or
    :class:`ReturnValueMissing`, after the cleanup), else the last log line and the result."""
    value: Any = None
    missing: ReturnValueMissing | None = None
    if finish.return_value_from_log and event.succeeded and event.job is not None:
        try:
            value = await read_return_value(hook, event.job)
        except ReturnValueMissing as err:
            missing = err
    await clean_up(hook, event, finish.on_finish_action, log)
    result = settled(event)
    log.info(result_line(result))
    if missing is not None:
        raise missing
    return value if finish.return_value_from_log else result


async def end_task(
    hook: AsyncTrainingJobHook,
    event: WaitEvent,
    finish: FinishOptions,
    log: Log,
    push: Callable[[dict[str, Any]], Awaitable[None]],
) -> bool:
    """A successful wait's end in the triggerer, so that no worker has to resume: the result (the return
    value with ``return_value_from_log``) pushed by ``push`` (``{XCom key: value}``, as a worker pushes it),
    the cleanup and the last log line. ``False`` when it cannot all be done here (no return-value line, the
    push failed): the job is left as it is, and the worker that resumes does it (and says what is wrong)."""
    result = build_result(event)
    value: Any = result
    if finish.return_value_from_log and event.job is not None:
        try:
            value = await read_return_value(hook, event.job)  # before the job (and its pods) may go
        except ReturnValueMissing:
            return False
    if finish.push_result:
        try:
            await push(xcoms_of(value, finish.multiple_outputs))
        except Exception as err:
            log.warning("Could not push the result (%s: %s); resuming the task", type(err).__name__, err)
            return False  # the job is still there for the worker
    await clean_up(hook, event, finish.on_finish_action, log)
    log.info(result_line(result))
    return True


async def clean_up(
    hook: AsyncTrainingJobHook, event: WaitEvent, on_finish_action: OnFinishAction, log: Log
) -> None:
    """Delete the job if :func:`finish_deletion` says so."""
    if event.job is not None and (why := finish_deletion(event, on_finish_action)):
        await delete(hook, event.job, why, log)


async def delete(hook: AsyncTrainingJobHook, ref: JobRef, why: str, log: Log) -> bool:
    """Delete the job ``ref`` names (its cleanup children too), saying why; ``False``: it was gone already, or
    the name is another try's job now (another uid), left alone."""
    from airflow_provider_training.jobs import delete_job
    from airflow_provider_training.kinds.registry import get_kind

    log.info("Deleting %s (%s)", ref.label, why)
    kind = get_kind(ref.kind, ref.api_version)
    deleted = await delete_job(hook, kind, ref.name, ref.namespace, uid=ref.uid)
    if not deleted:
        log.info("It was already gone, or that name is now another try's job (left alone)")
    return deleted


def finish_deletion(event: WaitEvent, on_finish_action: OnFinishAction) -> str | None:
    """Why the job is deleted once the wait ended (``None``: it is kept): a timed-out job always, a finished
    one as ``on_finish_action`` says, a ``failed`` one too (also when the wait failed it, its job still
    running: a replica past ``max_restarts``); after an ``error`` event (the wait broke, not the job) it is
    kept."""
    if event.job is None:
        return None
    if event.outcome is Outcome.TIMEOUT:
        return "timeout"
    state = event.state
    deletes = on_finish_action == "delete" or (
        on_finish_action == "delete_succeeded" and state is JobState.SUCCEEDED
    )
    if (state in (JobState.SUCCEEDED, JobState.FAILED) or event.outcome is Outcome.FAILED) and deletes:
        return f"on_finish_action={on_finish_action!r}"
    return None


def xcoms_of(result: Any, multiple_outputs: bool) -> dict[str, Any]:
    """The XComs a worker would push for ``result``: with ``multiple_outputs`` each key of the dict, then
    ``return_value``. A result that cannot have multiple outputs raises ``TypeError`` (a worker says why)."""
    if not multiple_outputs:
        return {"return_value": result}
    if not isinstance(result, dict) or not all(isinstance(key, str) for key in result):
        raise TypeError("multiple_outputs needs a dict with string keys")
    return {**result, "return_value": result}


def returned_value(log: str, where: str) -> Any:
    """The value on the last return-value line of ``log`` (the deciding replica's), else
    :class:`ReturnValueMissing` naming ``where`` (the pod)."""
    found: str | None = None
    for line in log.splitlines():
        _, marker, rest = line.partition(RESULT_MARKER)
        if marker:
            found = rest
    if found is None:
        raise ReturnValueMissing(
            f"{where} ended successfully but its log has no return-value line ({RESULT_MARKER}...): was the "
            "container's command replaced, or the log rotated away?"
        )
    return json.loads(found)


async def read_return_value(hook: AsyncTrainingJobHook, ref: JobRef) -> Any:
    """The return value the deciding replica printed: the last marked line of its pod's log (of the
    kind's master pods, the one that has the line)."""
    from airflow_provider_training.kinds.registry import get_kind

    kind = get_kind(ref.kind, ref.api_version)
    pods = await hook.list_job_pods(kind, ref.name, ref.namespace, master=True)
    names = sorted(str((pod.get("metadata") or {}).get("name")) for pod in pods)
    for name in names:
        log = await hook.read_log(ref.namespace, name, kind.default_container)
        if RESULT_MARKER in log:
            return returned_value(log, f"pod {name}")
    if names:
        found = f"its deciding replica's pod ({', '.join(names)}) logged no return value"
    else:
        found = "no pod of its deciding replica is left to read the return value from"
    raise ReturnValueMissing(
        f"{ref.label} succeeded but {found} ({RESULT_MARKER}...): were its pods cleaned up (cleanPodPolicy), "
        "or its container's command replaced?"
    )
