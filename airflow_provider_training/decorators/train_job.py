"""``@task.train_job``: a function of the DAG file, run by every node of a Kubeflow Trainer v2 TrainJob.

The TrainJob runs on a (Cluster)TrainingRuntime; its trainer's command becomes the function's bootstrap.
With a torch runtime each node has the env of the Trainer's torch plugin (``PET_NNODES``, ``PET_NODE_RANK``,
``PET_MASTER_ADDR``, ``PET_MASTER_PORT``, ...), and node 0's return value becomes the task's XCom (the node's
``JOB_COMPLETION_INDEX`` when the runtime sets no ``PET_NODE_RANK``). See docs/decorators.md.
"""

from __future__ import annotations

import copy
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
from airflow_provider_training.operators.trainer import TrainJobOperator

OWNED_TRAINER_FIELDS = ("command", "args", "env", "image", "numNodes")


class TrainJobFunctionOperator(TrainingFunctionOperator, TrainJobOperator):
    """The operator behind ``@task.train_job`` (see :class:`TrainJobOperator` for the other parameters).

    :param runtime: the (Cluster)TrainingRuntime's name. :param runtime_kind: as in :class:`TrainJobOperator`.
    :param num_nodes: ``trainer.numNodes`` (default: the runtime's).
    :param image: ``trainer.image`` (default: the runtime's); it needs the packages the function imports.
    :param env: more env variables for every node (a mapping, or a list of env entries).
    :param trainer: more ``spec.trainer`` fields (``resourcesPerNode``, ``numProcPerNode``); the command,
        args, env, image and node count are the decorator's.
    """

    custom_operator_name: ClassVar[str] = "@task.train_job"
    rank_env: ClassVar[tuple[str, ...]] = ("PET_NODE_RANK", "JOB_COMPLETION_INDEX")

    def __init__(
        self,
        *,
        runtime: str,
        num_nodes: int | None = None,
        image: str | None = None,
        env: Mapping[str, Any] | Sequence[Any] | None = None,
        trainer: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if "job" in kwargs:
            raise ValueError(f"{self.custom_operator_name} builds the TrainJob: pass runtime, not job")
        if num_nodes is not None and (
            isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1
        ):
            raise ValueError(f"num_nodes must be a whole number >= 1; got {num_nodes!r}")
        if image is not None and (not isinstance(image, str) or not image):
            raise ValueError(
                f"image must be a non-empty string (or None: the runtime's image); got {image!r}"
            )
        if owned := sorted(set(trainer or {}) & set(OWNED_TRAINER_FIELDS)):
            raise ValueError(
                f"trainer must not set {', '.join(owned)}: {self.custom_operator_name} sets the command, "
                "args and env, and takes image, num_nodes and env as its own parameters"
            )
        check_env(env)
        self.env = env
        body: dict[str, Any] = {**(trainer or {}), "command": bootstrap_command()}
        if image is not None:
            body["image"] = image
        if num_nodes is not None:
            body["numNodes"] = num_nodes
        super().__init__(runtime=runtime, trainer=body, **kwargs)

    def job_for(self, encoded_payload: str) -> dict[str, Any]:
        manifest = copy.deepcopy(self.job)
        manifest["spec"]["trainer"]["env"] = merged_env(self.env, encoded_payload)
        return manifest


def train_job_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """``@task.train_job(runtime=..., num_nodes=...)``: run the function on every node of a TrainJob and
    return node 0's return value. Keyword arguments go to :class:`TrainJobFunctionOperator`."""
    return shipping_decorator(python_callable, multiple_outputs, TrainJobFunctionOperator, kwargs)
