"""What Airflow's metadata database says about a task instance's training job, read in the api-server.

The operator records its job in the task-state store (key ``training_job``, see
:func:`airflow_provider_training.submission.JobSubmitter._remember`: identity, connection id, submitting try),
the trigger saves the pods' last lines with its log position (XCom ``training_log_position``), the operator
stores its link data (XCom ``training_job``), and the serialized DAG tells which operator the task runs.
Synchronous (SQLAlchemy): call it from a thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_training.hooks.connection import DEFAULT_CONN_ID
from airflow_provider_training.links import TrainingJobLink, format_link
from airflow_provider_training.submission import STATE_KEY
from airflow_provider_training.triggers.log_position import XCOM_KEY


class TaskNotFound(LookupError):
    """No such task instance (or try of it)."""


@dataclass(frozen=True)
class TaskRecord:
    """One try of a task instance, as the database has it."""

    try_number: int
    state: str | None
    operator: str | None
    training: bool
    ref: dict[str, Any] | None = None  # the job the latest submitting try recorded
    saved_tails: dict[str, Any] = field(default_factory=dict)  # {pod: {"replica", "lines"}}
    link: str | None = None  # the job's page, as the task's "Training Job" link renders it

    @property
    def conn_id(self) -> str:
        """The connection the operator used (older records lack it: the default connection)."""
        return str((self.ref or {}).get("kubernetes_conn_id") or DEFAULT_CONN_ID)

    @property
    def recorded_try(self) -> int | None:
        """The try that recorded :attr:`ref` (``None`` for records older than the Training tab)."""
        number = (self.ref or {}).get("try_number")
        return int(number) if number is not None else None


def read_task(dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int | None) -> TaskRecord:
    """The try ``try_number`` (default: the current one) of the task instance; or :class:`TaskNotFound`."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session
    from sqlalchemy import select

    where = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}
    with create_session() as session:
        ti = session.scalar(select(TaskInstance).filter_by(**where))
        if ti is None:
            raise TaskNotFound(f"no task instance {dag_id}/{run_id}/{task_id} (map index {map_index})")
        state = ti.state
        number = ti.try_number if try_number is None else try_number
        if number != ti.try_number:
            old = session.scalar(select(TaskInstanceHistory).filter_by(**where, try_number=number))
            if old is None:
                raise TaskNotFound(f"task instance {dag_id}/{run_id}/{task_id} has no try {number}")
            state = old.state
        dag = _dag_bag(DBDagBag).get_dag_for_run(ti.dag_run, session=session)
        task = dag.task_dict.get(task_id) if dag is not None else None
        ref = _stored(session, ti.dag_run.id, task_id, map_index)
        position = _xcom(session, where, XCOM_KEY) if number == ti.try_number else None
        tails = position.get("tails") if isinstance(position, dict) else None
        link_data = _xcom(session, where, TrainingJobLink.key)
        return TaskRecord(
            try_number=number,
            state=str(state) if state is not None else None,
            operator=getattr(task, "task_type", None) or ti.operator,
            training=ref is not None or _is_training(task),
            ref=ref,
            saved_tails=tails if isinstance(tails, dict) else {},
            link=(format_link(link_data) or None) if isinstance(link_data, dict) else None,
        )


_DAG_BAGS: list[Any] = []


def _dag_bag(cls: type[Any]) -> Any:
    """One ``DBDagBag`` for the process: it caches deserialized DAGs by version, as the api-server's own."""
    if not _DAG_BAGS:
        _DAG_BAGS.append(cls())
    return _DAG_BAGS[0]


def _stored(session: Any, dag_run_id: int, task_id: str, map_index: int) -> dict[str, Any] | None:
    from airflow.models.task_state_store import TaskStateStoreModel
    from sqlalchemy import select

    row = session.scalar(
        select(TaskStateStoreModel).filter_by(
            dag_run_id=dag_run_id, task_id=task_id, map_index=map_index, key=STATE_KEY
        )
    )
    if row is None:
        return None
    try:
        value = json.loads(row.value)
    except ValueError:
        return None
    return value if isinstance(value, dict) and value.get("name") and value.get("kind") else None


def _xcom(session: Any, where: dict[str, Any], key: str) -> Any:
    """The task instance's XCom ``key`` (of its current try: a new try starts without XComs), or ``None``."""
    from airflow.models.xcom import XComModel

    query = XComModel.get_many(
        run_id=where["run_id"],
        key=key,
        task_ids=where["task_id"],
        dag_ids=where["dag_id"],
        map_indexes=where["map_index"],
    )
    row = session.scalars(query).first()
    return XComModel.deserialize_value(row) if row is not None else None


def _is_training(task: Any) -> bool:
    """Whether the serialized task runs one of this provider's job-submitting operators."""
    module, name = getattr(task, "_task_module", None) or "", getattr(task, "task_type", None) or ""
    if not module.startswith("airflow_provider_training."):
        return False
    import importlib

    from airflow_provider_training.operators.training import TrainingJobOperator

    try:
        cls = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return False
    return isinstance(cls, type) and issubclass(cls, TrainingJobOperator)
