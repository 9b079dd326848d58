"""Deletes the job of a deferred task that a user marks failed or success, from the API server itself.

The trigger's ``on_kill`` removes the job when a triggerer cancels the trigger of a killed task, and the
trigger's start check removes it when the task was marked while no triggerer ran. One case escapes both: a
triggerer stopped (a rolling restart's SIGTERM) in the very loop that drops the marked task's trigger never
cancels it, and no later triggerer sees the trigger, whose row is cleaned up. So the API server, which fires
``on_task_instance_failed`` / ``on_task_instance_success`` listeners when a user sets a state, deletes the job
named by the task's trigger right away, with the trigger's uid precondition, whatever a triggerer does.

Only the API's state changes are handled: Airflow calls these hooks with ``previous_state=None`` there, and
with the previous state everywhere else (a worker's own end, the scheduler's failure handling). Only tasks
deferred on this provider's trigger qualify, and ``on_kill_action="keep"`` (sensors always) keeps the job.
The delete runs in a background thread, so the user's request never waits on the Kubernetes API.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from airflow.listeners import hookimpl

if TYPE_CHECKING:
    from airflow_provider_training.job_wait import JobWait

log = logging.getLogger(__name__)

TRIGGER_CLASSPATH = "airflow_provider_training.triggers.training.TrainingJobTrigger"

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


@hookimpl
def on_task_instance_failed(previous_state: Any, task_instance: Any, error: Any) -> None:
    marked(previous_state, task_instance)


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    marked(previous_state, task_instance)


def marked(previous_state: Any, task_instance: Any) -> Future[None] | None:
    """Start deleting the job of ``task_instance`` if a user set its state while it was deferred on this
    provider's trigger; returns the background deletion (``None`` when there is nothing to do)."""
    if previous_state is not None or getattr(task_instance, "trigger_id", None) is None:
        return None
    trigger = task_instance.trigger  # the row is only cleaned up later, by the triggerer or scheduler
    if trigger is None or trigger.classpath != TRIGGER_CLASSPATH:
        return None
    from airflow_provider_training.job_wait import JobWait

    wait, state = JobWait.from_kwargs(trigger.kwargs), task_instance.state  # any version's trigger row
    if wait.finish.on_kill_action != "delete":
        log.info("%s marked %s while deferred: keeping %s (on_kill_action)", task_instance, state, wait.label)
        return None
    log.info("%s marked %s while deferred: deleting %s", task_instance, state, wait.label)
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="training-kill")
        return _executor.submit(delete_job, wait)


def delete_job(wait: JobWait) -> None:
    """Delete the trigger's job and its cleanup children, unless the name is another try's job now."""
    from airflow_provider_training.hooks.training import TrainingJobHook
    from airflow_provider_training.jobs import delete_job as delete
    from airflow_provider_training.kinds.registry import get_kind

    job = wait.job
    try:
        with TrainingJobHook(wait.kubernetes_conn_id) as hook:
            kind = get_kind(job.kind, job.api_version)
            deleted = hook.run(delete(hook.async_hook, kind, job.name, job.namespace, uid=job.uid))
    except Exception:
        log.exception("Could not delete %s", job.label)
        return
    log.info("%s %s", job.label, "deleted" if deleted else "was already gone (or is another try's job now)")
