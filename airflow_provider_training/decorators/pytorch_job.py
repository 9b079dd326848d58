"""``@task.pytorch_job``: a function of the DAG file, run by every replica of a Kubeflow PyTorchJob.

The job has one Master and ``workers`` Workers running ``image``; each replica runs the function with the
env the Training Operator sets (``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``), and the Master's
(``RANK`` 0) return value becomes the task's XCom. See docs/decorators.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from airflow.sdk.bases.decorator import TaskDecorator

from airflow_provider_training.decorators.base import (
    TrainingFunctionOperator,
    check_env,
    merged_env,
    shipping_decorator,
)
from airflow_provider_training.decorators.shipping import bootstrap_command
from airflow_provider_training.operators.kubeflow import PyTorchJobOperator
from airflow_provider_training.params import DEFAULT_RESTART_POLICY, check_text


class PyTorchJobFunctionOperator(TrainingFunctionOperator, PyTorchJobOperator):
    """The operator behind ``@task.pytorch_job`` (see :class:`PyTorchJobOperator` for the other parameters).

    :param image: the replicas' image (it needs the Python packages the function imports).
    :param workers: Worker replicas besides the one Master (``0``: the Master alone).
    :param env: more env variables for every replica (a mapping, or a list of env entries).
    :param resources: each replica container's ``resources``. :param container: more container fields.
    :param pod_spec: more pod spec fields. :param restart_policy: default ``"Never"``, as
        :func:`~airflow_provider_training.specs.pytorch_job`'s: an exception fails the job at once
        (``"OnFailure"`` restarts the replica, until ``runPolicy.backoffLimit`` restarts fail the job).
    :param run_policy: ``spec.runPolicy``; its ``cleanPodPolicy`` defaults to ``"None"`` (the Master's pod
        must outlive the job for its return value to be read), its ``backoffLimit`` to the builders' 3.
    """

    custom_operator_name: ClassVar[str] = "@task.pytorch_job"
    rank_env: ClassVar[tuple[str, ...]] = ("RANK",)

    def __init__(
        self,
        *,
        image: str,
        workers: int = 1,
        env: Mapping[str, Any] | Sequence[Any] | None = None,
        run_policy: Mapping[str, Any] | None = None,
        resources: Any = None,
        container: Mapping[str, Any] | None = None,
        pod_spec: Mapping[str, Any] | None = None,
        restart_policy: str = DEFAULT_RESTART_POLICY,
        **kwargs: Any,
    ) -> None:
        self.image = check_text("image", image)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(
                f"workers must be a whole number >= 0 (Workers besides the Master); got {workers!r}"
            )
        self.workers = workers
        check_env(env)
        self.env = env
        self.run_policy = {"cleanPodPolicy": "None", **(run_policy or {})}
        if self.run_policy["cleanPodPolicy"] == "All":
            raise ValueError(
                'run_policy cleanPodPolicy "All" deletes the Master\'s pod when the job ends, and its log '
                'with the return value: use "None" (the default) or "Running"'
            )
        options = {"resources": resources, "container": container, "pod_spec": pod_spec}
        self.job_options = {key: value for key, value in options.items() if value is not None}
        self.job_options["restart_policy"] = check_text("restart_policy", restart_policy)
        super().__init__(job={}, **kwargs)  # the job is built in execute, around the resolved arguments

    def job_for(self, encoded_payload: str) -> dict[str, Any]:
        from airflow_provider_training.specs import pytorch_job

        return pytorch_job(
            image=str(self.image),
            command=bootstrap_command(),
            master=1,
            workers=self.workers,
            env=merged_env(self.env, encoded_payload),
            run_policy=self.run_policy,
            **self.job_options,
        )


def pytorch_job_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """``@task.pytorch_job(image=..., workers=...)``: run the function in every replica of a PyTorchJob and
    return the Master's return value. Keyword arguments go to :class:`PyTorchJobFunctionOperator`."""
    return shipping_decorator(python_callable, multiple_outputs, PyTorchJobFunctionOperator, kwargs)
