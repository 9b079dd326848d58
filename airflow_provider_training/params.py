"""Parameter checks shared by operators, sensors and the trigger (cheap to import at DAG parse time)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_training.kinds.base import JobState

# The states a wait can target: a job is waited for until it succeeded, or until it runs.
TARGET_STATES = (JobState.SUCCEEDED.value, JobState.RUNNING.value)
# What happens to the job when its task is killed (operator on_kill, or the trigger's while deferred).
ON_KILL_ACTIONS = ("delete", "keep")
# What happens to the job once it finished (operator execute_complete, or the trigger that ends the task).
ON_FINISH_ACTIONS = ("keep", "delete", "delete_succeeded")


def check_choice(name: str, value: Any, allowed: Sequence[Any]) -> Any:
    """``value`` if it is one of ``allowed``, else a ValueError that names the parameter and the choices."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}; got {value!r}")
    return value
