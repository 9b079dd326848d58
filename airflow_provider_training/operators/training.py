"""``TrainingJobOperator``: submit any training job kind, wait for it without a worker slot, report why.

Parameters and glue only: validation is ``specs.load_job``, API calls are the hook (one per ``execute``),
what the wait is, is a :class:`~airflow_provider_training.job_wait.JobWait` (built in :meth:`_job_wait`),
waiting is the trigger's :class:`~airflow_provider_training.waiting.JobWaiter` (run on the worker's hook in
sync mode), naming is :mod:`~airflow_provider_training.naming`, the result, the cleanup and the errors are
:mod:`~airflow_provider_training.completion`. Nothing heavy is imported before ``execute``.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf

from airflow_provider_training.links import TrainingJobLink
from airflow_provider_training.params import (
    ACTIONS_IF_EXISTS,
    DECIDING,
    DEFAULT_MAX_RESTARTS,
    ON_FINISH_ACTIONS,
    ON_KILL_ACTIONS,
    WAIT_UNTIL,
    check_annotations,
    check_bool,
    check_choice,
    check_labels,
    check_log_replicas,
    check_log_replicas_for,
    check_max_log_streams,
    check_max_restarts,
    check_namespace,
    check_optional_seconds,
    check_seconds,
    check_text,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_training.hooks.training import TrainingJobHook
    from airflow_provider_training.job_wait import FinishOptions, JobWait
    from airflow_provider_training.outcome import JobRef, WaitEvent


def status_grace_period() -> float:
    """``[training] status_grace_period``: seconds a new job may have no status (its operator not running)."""
    return conf.getfloat("training", "status_grace_period", fallback=60.0)


class TrainingJobOperator(BaseOperator):
    """Submit a training job (any registered kind), wait for it, and return its result.

    :param job: the job as a dict, a YAML string, a path to a ``.yaml``/``.yml`` file (rendered as a
        template), or a pydantic spec model. Validated before anything is sent.
    :param kind: kind name (``PyTorchJob``) when ``job`` does not say; the per-kind operators fix it.
    :param api_version: apiVersion to pick among kinds of the same name.
    :param job_name: the job's name; default: ``metadata.name`` of ``job``, else derived from the dag id, task
        id, run id and map index (a retry finds the same job).
    :param namespace: default: ``metadata.namespace``, then the connection's namespace, then ``default``.
    :param kubernetes_conn_id: a cncf.kubernetes ``kubernetes`` connection.
    :param wait_until: ``"Succeeded"`` (default), ``"Running"`` or ``None`` (return after submitting).
    :param deferrable: wait in the triggerer; the sync mode runs the same trigger inline.
    :param action_if_job_exists: when this task's job exists already (an earlier try): ``"reattach"``
        reuses it (a previous job that *failed* is deleted and submitted again), ``"recreate"`` deletes and
        submits again, ``"fail"`` raises.
    :param on_finish_action: ``"keep"``, ``"delete"`` or ``"delete_succeeded"``, once the job finished.
    :param on_kill_action: ``"delete"`` the job when the task is killed, or ``"keep"`` it; in sync mode and
        while deferred (the trigger's ``on_kill`` is told the same).
    :param get_logs: stream replica logs into the task log. :param log_replicas: ``"deciding"`` (the replica
        type that decides the job; ``"master"`` is its old name), ``"all"`` or a list of the kind's replica
        types. :param max_log_streams: how many replica pods the triggerer follows live at once, over all its
        jobs (default: half its open-file limit); past it, this job follows only its deciding replica.
    :param startup_timeout: seconds after creation within which a replica pod must start (else ``timeout``).
    :param max_restarts: fail the task once a replica that keeps failing restarted more than this many times
        (its pod's restarts, and those of the pods the operator replaced under its name), naming the replica,
        its exit code and last log lines; the job is then deleted or kept as ``on_finish_action`` says.
        Default 3; ``None``: no limit (the job's own ``backoffLimit`` decides).
    :param check_interval: the longest time, in seconds, between the wait's time-based checks (the
        deadline, the startup timeout); watch events arrive at once. ``poll_interval`` is its deprecated
        name (nothing polls), still accepted with a ``DeprecationWarning``.
    :param labels: extra labels for the job object. :param annotations: extra annotations.

    Every parameter is checked before anything is sent (see :mod:`airflow_provider_training.params`): the
    plain ones here, the templated ones and those needing the kind in :meth:`execute`, before any request.
    """

    template_fields: Sequence[str] = ("job", "job_name", "namespace")
    template_ext: Sequence[str] = (".yaml", ".yml")
    operator_extra_links = (TrainingJobLink(),)
    ui_color = "#c6e2ff"

    job_kind: ClassVar[str | None] = None
    job_api_version: ClassVar[str | None] = None
    # The result is the value the deciding replica logged, not the job's summary (the decorators').
    return_value_from_log: ClassVar[bool] = False

    def __init__(
        self,
        *,
        job: Any,
        kind: str | None = None,
        api_version: str | None = None,
        job_name: str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = "kubernetes_default",
        wait_until: str | None = "Succeeded",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        action_if_job_exists: str = "reattach",
        on_finish_action: str = "keep",
        on_kill_action: str = "delete",
        get_logs: bool = True,
        log_replicas: str | list[str] = DECIDING,
        max_log_streams: int | None = None,
        startup_timeout: float | None = conf.getfloat("training", "startup_timeout", fallback=600.0),
        check_interval: float = 5.0,
        max_restarts: int | None = DEFAULT_MAX_RESTARTS,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        poll_interval: float | None = None,  # check_interval's deprecated name, kept for .partial() too
        **kwargs: Any,
    ) -> None:
        if poll_interval is not None:
            warnings.warn(
                "poll_interval is deprecated: nothing polls; use check_interval (the longest time between "
                "the wait's time-based checks)",
                DeprecationWarning,
                stacklevel=2,
            )
            check_interval = poll_interval
        super().__init__(**kwargs)
        if job is None:
            raise ValueError("job is required: a dict, YAML text, a .yaml/.yml path or a spec model")
        self.job = job
        self.kind = check_text("kind", kind, optional=True) or self.job_kind
        self.api_version = check_text("api_version", api_version, optional=True) or self.job_api_version
        self.job_name = job_name
        self.namespace = namespace
        self.kubernetes_conn_id = check_text("kubernetes_conn_id", kubernetes_conn_id, optional=True)
        self.wait_until = check_choice("wait_until", wait_until, WAIT_UNTIL)
        self.deferrable = check_bool("deferrable", deferrable)
        self.action_if_job_exists = check_choice(
            "action_if_job_exists", action_if_job_exists, ACTIONS_IF_EXISTS
        )
        self.on_finish_action = check_choice("on_finish_action", on_finish_action, ON_FINISH_ACTIONS)
        self.on_kill_action = check_choice("on_kill_action", on_kill_action, ON_KILL_ACTIONS)
        self.get_logs = check_bool("get_logs", get_logs)
        self.log_replicas = check_log_replicas(log_replicas)
        self.max_log_streams = check_max_log_streams(max_log_streams)
        self.startup_timeout = check_optional_seconds("startup_timeout", startup_timeout)
        self.check_interval = check_seconds("check_interval", check_interval)
        self.max_restarts = check_max_restarts(max_restarts)
        self.labels = check_labels("labels", labels)
        self.annotations = check_annotations("annotations", annotations)
        self._job_ref: JobRef | None = None

    def _hook(self) -> TrainingJobHook:
        from airflow_provider_training.hooks.training import TrainingJobHook

        return TrainingJobHook(self.kubernetes_conn_id)

    def _check_rendered(self) -> None:
        """The templated fields, once rendered (``execute`` calls it before anything is sent)."""
        check_text("job_name", self.job_name, optional=True)
        check_namespace("namespace", self.namespace)

    def execute(self, context: Context) -> Any:
        from airflow_provider_training import naming
        from airflow_provider_training.outcome import JobRef, Outcome, WaitEvent
        from airflow_provider_training.reading import read_status
        from airflow_provider_training.results import build_result
        from airflow_provider_training.submission import JobSubmitter
        from airflow_provider_training.triggers.training import TrainingJobTrigger
        from airflow_provider_training.waiting import run_on

        self._check_rendered()
        submitter = JobSubmitter(
            kubernetes_conn_id=self.kubernetes_conn_id,
            action_if_job_exists=self.action_if_job_exists,
            log=self.log,
        )
        kind, body = submitter.prepare(
            self.job,
            kind=self.kind,
            api_version=self.api_version,
            job_name=self.job_name,
            namespace=self.namespace,
            identity=naming.TaskIdentity.from_context(context),
            labels=self.labels,
            annotations=self.annotations,
            wait_until=self.wait_until,
        )
        check_log_replicas_for(self.log_replicas, kind.kind, kind.replica_types)
        with self._hook() as hook:
            job = submitter.submit(hook, kind, body, context)
            self._job_ref = ref = JobRef.of(kind, job)
            TrainingJobLink.persist(
                context,
                kubernetes_conn_id=self.kubernetes_conn_id,
                plural=kind.resource.plural,
                identity=ref.to_dict(),
            )
            if self.wait_until is None:
                status = read_status(hook, kind, job)
                return build_result(WaitEvent(Outcome.SUCCESS, ref, job_status=status.to_dict()))
            job_wait = self._job_wait(ref, context)
            trigger = TrainingJobTrigger(job_wait=job_wait)
            waiter = trigger.waiter(hook.async_hook, self.log)
            # A job found finished (a reattach) ends here, in one step; else it is waited for.
            event = run_on(hook, waiter.conclude(job))
            if event is None and self.deferrable:
                if self.get_logs:
                    from airflow_provider_training.triggers.log_position import store_not_yet

                    store_not_yet(context)
                self.defer(
                    trigger=trigger,
                    method_name="execute_complete",
                    timeout=_defer_timeout(job_wait.wait.deadline, self),
                )
            return self._complete(event or run_on(hook, waiter.wait()), hook)

    def _job_wait(self, ref: JobRef, context: Context) -> JobWait:
        """What the wait is, from this operator's parameters: the trigger's one argument."""
        from airflow_provider_training.job_wait import JobWait, WaitOptions
        from airflow_provider_training.kinds.base import JobState

        wait = WaitOptions(
            target=JobState(str(self.wait_until)),
            deadline=_deadline(self, context),
            startup_timeout=self.startup_timeout,
            status_grace_period=status_grace_period(),
            check_interval=self.check_interval,
            get_logs=self.get_logs,
            log_replicas=self.log_replicas,
            max_log_streams=self.max_log_streams,
            max_restarts=self.max_restarts,
        )
        return JobWait(ref, self.kubernetes_conn_id, wait, self._finish_options(), _try_number(context))

    def _finish_options(self) -> FinishOptions:
        from airflow_provider_training.job_wait import FinishOptions

        return FinishOptions(
            on_finish_action=self.on_finish_action,
            on_kill_action=self.on_kill_action,
            # A deferred success ends the task in the triggerer (the trigger does execute_complete's
            # success work): no second worker, and no resumed try for the scheduler's executor-event race
            # (apache/airflow#72716) to fail. Inline (sync mode, dag.test()) the trigger returns the event.
            end_from_trigger=self.deferrable,
            push_result=self.do_xcom_push,
            return_value_from_log=self.return_value_from_log,
            multiple_outputs=self.multiple_outputs,
        )

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Resume after the deferral. When Airflow timed the deferral out itself (no triggerer ran the trigger
        until past the deadline, so the trigger's own ``timeout`` event never came), the job is deleted as
        that event would have deleted it; a failed trigger (the wait broke, not the job) keeps it."""
        from airflow.sdk.exceptions import TaskDeferralTimeout

        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except TaskDeferralTimeout:
            from airflow_provider_training.outcome import JobRef
            from airflow_provider_training.submission import stored_reference

            if ref := JobRef.from_dict(stored_reference(context)):
                with self._hook() as hook:
                    self._delete(hook, ref, "the deferral timed out")
            raise

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Turn the trigger's event payload into the XCom result or a :class:`TrainingJobError`, then clean
        up (see :meth:`_complete`)."""
        from airflow_provider_training.outcome import WaitEvent

        with self._hook() as hook:
            return self._complete(WaitEvent.from_payload(event), hook)

    def _complete(self, event: WaitEvent, hook: TrainingJobHook) -> Any:
        """The XCom result or a :class:`TrainingJobError`, after the cleanup
        (:func:`~airflow_provider_training.completion.complete`): a timed-out job is deleted; a finished one
        as ``on_finish_action`` says; after an ``error`` event (the wait broke, not the job) the job is
        kept."""
        from airflow_provider_training.completion import complete

        event.job = event.job or self._job_ref
        self._job_ref = event.job
        return hook.run(complete(hook.async_hook, event, self._finish_options(), self.log))

    def _delete(self, hook: TrainingJobHook, ref: JobRef, why: str) -> None:
        from airflow_provider_training.completion import delete

        hook.run(delete(hook.async_hook, ref, why, self.log))

    def _delete_on_kill(self, ref: JobRef) -> None:
        """Delete the killed task's job; a refusal (a 403, the API down) goes to the task log, not to a thread
        traceback on stderr: the job is still running and the user must know."""
        try:
            with self._hook() as hook:
                self._delete(hook, ref, "task killed")
        except Exception as err:
            self.log.error("Could not delete %s: it is left running. %s", ref.label, err)

    def on_kill(self) -> None:
        """Delete the job (unless ``on_kill_action="keep"``).

        Runs in a helper thread: on SIGTERM this is called from a signal handler that interrupts the inline
        wait's event loop, where resolving the connection synchronously is not allowed.
        """
        if self.on_kill_action != "delete" or not self._job_ref:
            return
        ref = self._job_ref
        thread = threading.Thread(target=self._delete_on_kill, args=(ref,), name="training-job-kill")
        thread.start()
        thread.join()


def _try_number(context: Context) -> int | None:
    """The running try, which the trigger compares with its task instance's when it is killed."""
    number = getattr(context.get("ti"), "try_number", None)
    return number if isinstance(number, int) else None


def _deadline(op: BaseOperator, context: Context) -> datetime | None:
    """``start_date + execution_timeout``, enforced by the trigger itself while deferred."""
    if not op.execution_timeout:
        return None
    import pendulum

    start = getattr(context.get("ti"), "start_date", None) or pendulum.now("UTC")
    return pendulum.instance(start) + op.execution_timeout


def _defer_timeout(deadline: datetime | None, op: TrainingJobOperator) -> timedelta | None:
    """The framework backstop, padded so the trigger's own ``timeout`` event (which deletes the job) wins."""
    if deadline is None:
        return None
    remaining = (deadline - datetime.now(UTC)).total_seconds()
    return timedelta(seconds=max(0.0, remaining) + max(60.0, 2 * op.check_interval))
