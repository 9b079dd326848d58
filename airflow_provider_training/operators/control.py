"""Suspend and resume a running training job, for every kind whose API can (the patch is the kind's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from airflow_provider_training.params import check_namespace, check_text

if TYPE_CHECKING:
    from airflow.sdk import Context


class TrainingJobControlOperator(BaseOperator):
    """What suspending and resuming share: find the job ``job_name``, send its kind's ``suspend_patch``, and
    return its result dict as it is right after the change. Kinds whose API cannot be suspended are refused
    before any request. Subclasses set :attr:`suspend`.

    :param job_name: the job. :param kind: its kind name (fixed by the per-family subclasses).
    :param api_version: to pick among same-named kinds. :param namespace: default: the connection's.
    """

    template_fields: Sequence[str] = ("job_name", "namespace")
    ui_color = "#f0e4c6"

    job_kind: ClassVar[str | None] = None
    job_api_version: ClassVar[str | None] = None
    suspend: ClassVar[bool]  # True: suspend the job; False: resume it

    def __init__(
        self,
        *,
        job_name: str,
        kind: str | None = None,
        api_version: str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = "kubernetes_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.kind = check_text("kind", kind, optional=True) or self.job_kind
        self.api_version = check_text("api_version", api_version, optional=True) or self.job_api_version
        if not self.kind:
            raise ValueError("kind is required: the custom resource's kind, as in its manifest")
        self.namespace = namespace
        self.kubernetes_conn_id = check_text("kubernetes_conn_id", kubernetes_conn_id, optional=True)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_provider_training.hooks.training import TrainingJobHook
        from airflow_provider_training.kinds.registry import get_kind
        from airflow_provider_training.outcome import JobRef, Outcome, WaitEvent
        from airflow_provider_training.reading import read_status
        from airflow_provider_training.results import build_result

        check_text("job_name", self.job_name)  # the templated fields, rendered
        check_namespace("namespace", self.namespace)
        kind = get_kind(str(self.kind), self.api_version)
        patch = kind.suspend_patch(self.suspend)
        if patch is None:
            raise ValueError(
                f"{kind.kind} ({kind.api_version}) cannot be suspended or resumed: its API has no such field"
            )
        with TrainingJobHook(self.kubernetes_conn_id) as hook:
            namespace = self.namespace or hook.get_namespace()
            job = hook.patch_job(kind, self.job_name, namespace, patch)
            status = read_status(hook, kind, job)
        action = "Suspended" if self.suspend else "Resumed"
        self.log.info("%s %s %s/%s (now %s)", action, kind.kind, namespace, self.job_name, status.state.value)
        return build_result(WaitEvent(Outcome.SUCCESS, JobRef.of(kind, job), job_status=status.to_dict()))


class TrainingJobSuspendOperator(TrainingJobControlOperator):
    """Suspend the job ``job_name`` (Kubeflow ``runPolicy.suspend``, T9k ``runMode.pause``) and return its
    result dict as it is right after the change. A waiting operator or sensor keeps waiting while the job is
    suspended, up to its deadline. Parameters: see :class:`TrainingJobControlOperator`.
    """

    suspend = True


class TrainingJobResumeOperator(TrainingJobControlOperator):
    """Resume a suspended job (see :class:`TrainingJobSuspendOperator`)."""

    suspend = False
