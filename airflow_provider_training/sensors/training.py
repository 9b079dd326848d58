"""``TrainingJobSensor``: wait for an existing training job (any kind) to reach a target state."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
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


class TrainingJobSensor(BaseSensorOperator):
    """Wait until the job ``job_name`` reaches ``target_state``; fail (skip with ``soft_fail``) if it fails.

    Poke mode reads the status once per poke (a missing job is waited for). Deferrable mode runs
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
            raise ValueError("kind is required (e.g. kind='PyTorchJob'), or use a per-kind sensor")
        self.kubernetes_conn_id = check_text("kubernetes_conn_id", kubernetes_conn_id, optional=True)
        self.target_state = target_state
        self.deferrable = check_bool("deferrable", deferrable)
        self.get_logs = check_bool("get_logs", get_logs)
        self.log_replicas = check_log_replicas(log_replicas)
        self.max_log_streams = check_max_log_streams(max_log_streams)

    def _job_kind(self) -> Any:
        from airflow_provider_training.kinds.registry import get_kind

        return get_kind(str(self.kind), self.api_version)

    def _check_rendered(self) -> None:
        """The templated fields once rendered, and the parameters that need the kind: before any request."""
        check_text("job_name", self.job_name)
        check_namespace("namespace", self.namespace)
        kind = self._job_kind()
        check_log_replicas_for(self.log_replicas, kind.kind, kind.replica_types)

    def _trigger(self, namespace: str, deadline: str | None, *, get_logs: bool | None = None) -> Any:
        from airflow_provider_training.triggers.training import TrainingJobTrigger

        kind = self._job_kind()
        return TrainingJobTrigger(
            kind=kind.kind,
            api_version=kind.api_version,
            job_name=self.job_name,
            namespace=namespace,
            kubernetes_conn_id=self.kubernetes_conn_id,
            target_state=self.target_state,
            get_logs=self.get_logs if get_logs is None else get_logs,
            log_replicas=self.log_replicas,
            max_log_streams=self.max_log_streams,
            deadline=deadline,
            startup_timeout=None,
            status_grace_period=status_grace_period(),
            poll_interval=float(self.poke_interval),
            allow_missing=True,
            on_kill_action="keep",  # the sensor only watches: killing it never deletes the job
        )

    def _submitter(self) -> Any:
        from airflow_provider_training.submission import JobSubmitter

        return JobSubmitter(kubernetes_conn_id=self.kubernetes_conn_id, log=self.log)

    def execute(self, context: Context) -> Any:
        self._check_rendered()
        if not self.deferrable:
            return super().execute(context)
        import pendulum

        from airflow_provider_training.waiting import run_inline

        submitter = self._submitter()
        with submitter.hook() as hook:
            namespace = self.namespace or hook.get_namespace()
        deadline = pendulum.now("UTC") + timedelta(seconds=float(self.timeout))
        trigger = self._trigger(namespace, deadline.isoformat())
        _, status = submitter.read(self._job_kind(), self.job_name, namespace)
        if status is not None and (status.state.terminal or status.state.value == self.target_state):
            # Done already: no deferral, but the event is handled as a deferred one's (soft_fail, never_fail).
            return self.resume_execution("execute_complete", {"event": run_inline(trigger)}, context)
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout) + max(60.0, 2 * float(self.poke_interval))),
        )

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """Read the status once; at the target state (or failed) the trigger's event, run inline on the
        finished wait, decides, so the result or error is the deferrable mode's."""
        kind = self._job_kind()
        grace = status_grace_period()
        job, status = self._submitter().read(kind, self.job_name, self.namespace, grace_seconds=grace)
        if job is None or status is None:
            self.log.info("%s %s does not exist (yet)", kind.kind, self.job_name)
            return False
        self.log.info("%s %s is %s", kind.kind, self.job_name, status.state.value)
        if status.stalled:  # no status past the grace period: nothing runs the job
            from airflow_provider_training.results import TrainingJobSensorError

            raise TrainingJobSensorError(f"{kind.kind} {self.job_name}: {status.message}")
        state = status.state.value
        if state not in ("Failed", "Succeeded", self.target_state):
            return False
        from airflow_provider_training.waiting import run_inline

        # A failed job's event names the failing replicas; a done one's carries the pods for the result.
        event = run_inline(self._trigger(job["metadata"]["namespace"], None, get_logs=False))
        return PokeReturnValue(is_done=True, xcom_value=self.execute_complete(context, event))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        from airflow_provider_training.results import TrainingJobSensorError, build_result, raise_for_event

        if event.get("status") == "timeout":
            raise AirflowSensorTimeout(f"{event.get('message')}")
        raise_for_event(event, TrainingJobSensorError)
        return build_result(event)
