"""What ``@task.pytorch_job`` and ``@task.train_job`` share: the decorated operator that ships its function to
the job's replicas (see :mod:`~airflow_provider_training.decorators.shipping`), waits like every training
operator, and returns the function's return value (the deciding replica's) instead of the job summary.

The return value is read from the deciding replica's log before ``on_finish_action`` may delete the job: by
the triggerer when a deferred success ends the task there (the trigger's ``return_value_from_log``), else on
the worker (sync mode, ``dag.test()``, or a trigger that found no return-value line).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_provider_training.decorators.shipping import (
    PAYLOAD_ENV,
    FunctionNotShippable,
    ReturnValueMissing,
    function_source,
    payload,
)
from airflow_provider_training.operators.training import TrainingJobOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_training.hooks.training import TrainingJobHook
    from airflow_provider_training.outcome import WaitEvent


class TrainingFunctionOperator(DecoratedOperator, TrainingJobOperator):
    """Base of the decorated training operators: a subclass (with the job kind's operator as its next base)
    says which env variables hold a replica's rank (:attr:`rank_env`) and builds the job around the payload
    (:meth:`job_for`). ``wait_until`` is always ``"Succeeded"``: the return value exists only then."""

    custom_operator_name: ClassVar[str]
    rank_env: ClassVar[tuple[str, ...]]
    return_value_from_log: ClassVar[bool] = True  # a deferred success ends in the triggerer, which pushes it

    # The function's source and arguments are not Jinja templates of the job; its arguments are (op_args,
    # op_kwargs, as in @task), and so are the job's name and namespace. No template files: an argument
    # ending in .yaml is a value.
    template_fields: Sequence[str] = ("op_args", "op_kwargs", "job_name", "namespace")
    template_ext: Sequence[str] = ()
    shallow_copy_attrs: Sequence[str] = ("python_callable",)

    def __init__(
        self, *, python_callable: Callable[..., Any], wait_until: str | None = "Succeeded", **kwargs
    ):
        self.function_source = function_source(python_callable, self.decorator)
        if wait_until != "Succeeded":
            raise ValueError(
                f'wait_until must be "Succeeded" for {self.custom_operator_name} (got {wait_until!r}): the '
                "function's return value exists once the job succeeded"
            )
        super().__init__(python_callable=python_callable, wait_until=wait_until, **kwargs)

    @property
    def decorator(self) -> str:
        return self.custom_operator_name.lstrip("@")

    def job_for(self, encoded_payload: str) -> Any:
        """The job to submit, its replicas running the payload (subclasses)."""
        raise NotImplementedError

    def shipped_job(self) -> Any:
        """The job to submit, around the payload of the function and its arguments as they are now (in
        ``execute``: rendered, XComs resolved); :class:`FunctionNotShippable` names an argument that is not
        JSON."""
        encoded = payload(
            self.function_source,
            self.python_callable,
            list(self.op_args),
            self.op_kwargs,
            rank_env=self.rank_env,
            decorator=self.decorator,
        )
        return self.job_for(encoded)

    def execute(self, context: Context) -> Any:
        """Arguments resolved (templates, XComs): refuse any that is not JSON, build the job, submit it."""
        self.job = self.shipped_job()
        return super().execute(context)

    def _complete(self, event: WaitEvent, hook: TrainingJobHook) -> Any:
        """The deciding replica's return value (``return_value_from_log``: read by
        :func:`~airflow_provider_training.completion.complete` before ``on_finish_action`` may delete the
        job); a failed job raises as every training operator's does."""
        value = super()._complete(event, hook)
        self.log.info("%s() returned %s", self.python_callable.__name__, _preview(value))
        return value


def shipping_decorator(
    python_callable: Callable[..., Any] | None,
    multiple_outputs: bool | None,
    operator_class: type[TrainingFunctionOperator],
    kwargs: Mapping[str, Any],
) -> TaskDecorator:
    """``task_decorator_factory`` for ``operator_class``, refusing an unshippable function where it is
    decorated (the operator checks again where the task is made, e.g. after ``.override``)."""
    decorator = operator_class.custom_operator_name.lstrip("@")

    def decorate(function: Callable[..., Any]) -> TaskDecorator:
        if not callable(function):
            raise TypeError(f"@{decorator} takes keyword arguments only; got {function!r}")
        function_source(function, decorator)
        return task_decorator_factory(
            function,
            multiple_outputs=multiple_outputs,
            decorated_operator_class=operator_class,
            **kwargs,
        )

    if python_callable is not None:
        return decorate(python_callable)
    return decorate  # type: ignore[return-value]  # applied to the function next, as task_decorator_factory's


def merged_env(env: Mapping[str, Any] | Sequence[Any] | None, encoded_payload: str) -> list[Any]:
    """The user's env entries (a mapping or a list of entries) and the payload's."""
    entries: list[Any] = (
        [{"name": str(key), "value": str(value)} for key, value in env.items()]
        if isinstance(env, Mapping)
        else list(env or [])
    )
    return [*entries, {"name": PAYLOAD_ENV, "value": encoded_payload}]


def check_env(env: Any) -> None:
    """``env`` is a mapping or a list of entries, and leaves the payload's variable alone."""
    if env is None:
        return
    if isinstance(env, Mapping):
        names = {str(key) for key in env}
    elif isinstance(env, list | tuple):
        names = {str(e.get("name") if isinstance(e, Mapping) else getattr(e, "name", "")) for e in env}
    else:
        raise ValueError(f"env must be a mapping of names to values or a list of env entries; got {env!r}")
    if PAYLOAD_ENV in names:
        raise ValueError(f"env must not set {PAYLOAD_ENV}: it carries the shipped function")


def _preview(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


__all__ = ["FunctionNotShippable", "ReturnValueMissing", "TrainingFunctionOperator", "shipping_decorator"]
