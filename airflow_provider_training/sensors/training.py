"""``TrainingJobSensor``: wait for an existing training job (any kind) to reach a target state."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowSensorTimeout

from airflow_provider_training.operators.training import status_grace_period
from airflow_provider_training.params import (
    DECIDING,
    TARGET_STATES,
    check_bool,
    check_choice,
    check_log_replicas,
    check_log_replicas_for,
    check_max_log_streams,
    check_namespace,
    check_text,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_training.kinds.base import JobKind
    from airflow_provider_training.outcome import WaitEvent
    from airflow_provider_training.triggers.training import TrainingJobTrigger


class TrainingJobSensor(BaseSensorOperator):
    """Wait until the job ``job_name`` reaches ``target_state``; fail (skip with ``soft_fail``) if it fails.

    Poke mode reads the job once per poke (a missing job is waited for), and concludes a finished one in the
    same step, without a watch. Deferrable mode runs
    ``TrainingJobTrigger`` with the sensor's ``timeout`` as its deadline. Both modes return (as XCom) the same
    result dict as ``TrainingJobOperator`` once the job reached the target state.

    :param job_name: the job. :param namespace: its namespace (default: the connection's, then ``default``).
    :param kind: kind name; the per-kind sensors fix it. :param api_version: to pick among same-named kinds.
    :param target_state: ``"Succeeded"`` (default) or ``"Running"``.
    :param get_logs: stream replica logs while deferred. :param log_replicas: ``deciding`` (alias ``master``),
        ``all`` or a list of the kind's replica types. :param max_log_streams: how many replica pods the
        triggerer follows live at once (default: half its open-file limit); past it, only the deciding one.
    """

    template_fields: Sequence[str] = ("job_name", "namespace")
    ui_color = "#e0f0ff"

    job_kind: ClassVar[str | None] = None
    job_api_version: ClassVar[str | None] = None

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str | None = None,
        kind: str | None = None,
        api_version: str | None = None,
        kubernetes_conn_id: str | None = "kubernetes_default",
        target_state: str = "Succeeded",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        get_logs: bool = False,
        log_replicas: str | list[str] = DECIDING,
        max_log_streams: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_choice("target_state", target_state, TARGET_STATES)
        self.job_name = job_name
        self.namespace = namespace
        self.kind = check_text("kind", kind, optional=True) or self.job_kind
        self.api_version = check_text("api_version", api_version, optional=True) or self.job_api_version
        if not self.kind:
            raise ValueError("kind is required (the custom resource's kind), or use a per-kind sensor")
        self.kubernetes_conn_id = check_text("kubernetes_conn_id", kubernetes_conn_id, optional=True)
        self.target_state = target_state
        self.deferrable = check_bool("deferrable", deferrable)
        self.get_logs = check_bool("get_logs", get_logs)
        self.log_replicas = check_log_replicas(log_replicas)
        self.max_log_streams = check_max_log_streams(max_log_streams)

    def _job_kind(self) -> JobKind:
        from airflow_provider_training.kinds.registry import get_kind

        return get_kind(str(self.kind), self.api_version)

    def _check_rendered(self) -> None:
        """The templated fields once rendered, and the parameters that need the kind: before any request."""
        check_text("job_name", self.job_name)
        check_namespace("namespace", self.namespace)
        kind = self._job_kind()
        check_log_replicas_for(self.log_replicas, kind.kind, kind.replica_types)

    def _trigger(self, namespace: str, deadline: datetime | None) -> TrainingJobTrigger:
        """The trigger of this sensor's wait; its :class:`~airflow_provider_training.job_wait.JobWait` is
        built here, from the sensor's parameters."""
        from airflow_provider_training.job_wait import FinishOptions, JobWait, WaitOptions
        from airflow_provider_training.kinds.base import JobState
        from airflow_provider_training.outcome import JobRef
        from airflow_provider_training.triggers.training import TrainingJobTrigger

        kind = self._job_kind()
        wait = WaitOptions(
            target=JobState(self.target_state),
            deadline=deadline,
            startup_timeout=None,
            status_grace_period=status_grace_period(),
            check_interval=float(self.poke_interval),
            get_logs=self.get_logs,
            log_replicas=self.log_replicas,
            max_log_streams=self.max_log_streams,
            allow_missing=True,
        )
        finish = FinishOptions(
            on_kill_action="keep"
        )  # the sensor only watches: killing it never deletes the job
        job = JobRef(self.job_name, namespace, None, kind.kind, kind.api_version)
        return TrainingJobTrigger(job_wait=JobWait(job, self.kubernetes_conn_id, wait, finish))

    def _conclude(self, deadline: datetime | None) -> tuple[str, WaitEvent | None]:
        """The job's namespace, and the event if the job read once ends the wait already (finished, at the
        target state, or never picked up): concluded in the same step, on one hook, with no watch. ``None``
        while it has yet to, or does not exist (yet); the sensor's trigger otherwise waits for it."""
        from airflow_provider_training.hooks.training import TrainingJobHook
        from airflow_provider_training.waiting import run_on

        kind = self._job_kind()
        with TrainingJobHook(self.kubernetes_conn_id) as hook:
            namespace = self.namespace or hook.get_namespace()
            job = hook.get_job(kind, self.job_name, namespace)
            if job is None:
                self.log.info("%s %s/%s does not exist (yet)", kind.kind, namespace, self.job_name)
                return namespace, None
            waiter = self._trigger(namespace, deadline).waiter(hook.async_hook, self.log)
            return namespace, run_on(hook, waiter.conclude(job))

    def execute(self, context: Context) -> Any:
        self._check_rendered()
        if not self.deferrable:
            return super().execute(context)
        deadline = datetime.now(UTC) + timedelta(seconds=float(self.timeout))
        namespace, event = self._conclude(deadline)
        if event is not None:
            # Done already: no deferral, but the event is handled as a deferred one's (soft_fail, never_fail).
            return self.resume_execution("execute_complete", {"event": event.to_payload()}, context)
        if self.get_logs:
            from airflow_provider_training.triggers.log_position import store_not_yet

            store_not_yet(context)
        self.defer(
            trigger=self._trigger(namespace, deadline),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout) + max(60.0, 2 * float(self.poke_interval))),
        )

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """Read the job once; when that ends the wait (the target state, failed, or never picked up), the
        event concluded from it decides, so the result or error is the deferrable mode's."""
        _, event = self._conclude(None)
        if event is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self.execute_complete(context, event.to_payload()))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        from airflow_provider_training.completion import settled
        from airflow_provider_training.outcome import Outcome, WaitEvent
        from airflow_provider_training.results import TrainingJobSensorError

        ended = WaitEvent.from_payload(event)
        if ended.outcome is Outcome.TIMEOUT:
            raise AirflowSensorTimeout(ended.message)
        return settled(ended, TrainingJobSensorError)
