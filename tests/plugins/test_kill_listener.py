"""The API server's kill listener against localkube over HTTP: a deferred task a user marks failed or success
loses its job (and only its own try's job); everything else is left alone.

The task instance is what the API server hands the listener after the state change: it still names its
trigger (the row is cleaned up later), a real ``Trigger`` row object with the trigger's serialized kwargs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from airflow.models.trigger import Trigger
from localkube.cluster import LocalKube
from localkube.pytest_plugin import connection_json

from airflow_provider_training.hooks.training import TrainingJobHook
from airflow_provider_training.jobs import create_job, delete_job
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.plugins import TrainingPlugin, kill_listener
from airflow_provider_training.triggers.training import TrainingJobTrigger
from tests.hooks.kube_env import FAST_RETRY, job_body

PYTORCH = get_kind("PyTorchJob")


@dataclass
class MarkedTaskInstance:
    """The attributes of the API server's ``TaskInstance`` the listener reads."""

    state: str
    trigger: Trigger | None
    trigger_id: int | None = 1


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalKube]:
    with LocalKube(runtime=None, controllers=[]) as kube:
        kube.write_kubeconfig(tmp_path / "kubeconfig")
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(kube.kubeconfig, "default"))
        yield kube


@pytest.fixture
def hook(cluster: LocalKube) -> Iterator[TrainingJobHook]:
    with TrainingJobHook(retry=FAST_RETRY) as h:
        yield h


def deferred_on(job: dict[str, Any], state: str, **trigger_args: Any) -> MarkedTaskInstance:
    """The task instance of a task deferred on the provider's trigger for ``job``, now in ``state``."""
    trigger = TrainingJobTrigger(
        kind="PyTorchJob",
        api_version="kubeflow.org/v1",
        job_name=job["metadata"]["name"],
        namespace="default",
        uid=job["metadata"]["uid"],
        **trigger_args,
    )
    return MarkedTaskInstance(state, Trigger.from_object(trigger))


def settle(future: Any) -> None:
    assert future is not None
    future.result(timeout=60)


@pytest.mark.parametrize("hook_name", ["on_task_instance_failed", "on_task_instance_success"])
def test_a_deferred_task_marked_by_a_user_loses_its_job(hook, hook_name):
    job = hook.run(create_job(hook.async_hook, PYTORCH, job_body("marked"), "default"))
    ti = deferred_on(job, "failed" if "failed" in hook_name else "success")

    if hook_name == "on_task_instance_failed":
        kill_listener.on_task_instance_failed(previous_state=None, task_instance=ti, error="set by a user")
    else:
        kill_listener.on_task_instance_success(previous_state=None, task_instance=ti)

    # The hook entry points return nothing: wait (bounded, no timing asserted) for the deletion they started.
    for _ in range(600):
        if hook.get_job(PYTORCH, "marked", "default") is None:
            break
        time.sleep(0.1)
    assert hook.get_job(PYTORCH, "marked", "default") is None


def test_keep_keeps_the_job(hook):
    job = hook.run(create_job(hook.async_hook, PYTORCH, job_body("kept"), "default"))
    assert kill_listener.marked(None, deferred_on(job, "failed", on_kill_action="keep")) is None
    assert hook.get_job(PYTORCH, "kept", "default")["metadata"]["uid"] == job["metadata"]["uid"]


def test_another_tries_job_of_the_same_name_stays(hook):
    old = hook.run(create_job(hook.async_hook, PYTORCH, job_body("same"), "default"))
    hook.run(delete_job(hook.async_hook, PYTORCH, "same", "default"))
    new = hook.run(create_job(hook.async_hook, PYTORCH, job_body("same"), "default"))

    settle(kill_listener.marked(None, deferred_on(old, "failed")))

    assert hook.get_job(PYTORCH, "same", "default")["metadata"]["uid"] == new["metadata"]["uid"]


def test_only_state_changes_by_a_user_of_deferred_tasks_on_this_trigger_count(hook):
    job = hook.run(create_job(hook.async_hook, PYTORCH, job_body("left-alone"), "default"))
    ti = deferred_on(job, "failed")
    other = deferred_on(job, "failed")
    assert other.trigger is not None
    other.trigger.classpath = "airflow.providers.cncf.kubernetes.triggers.pod.KubernetesPodTrigger"

    assert kill_listener.marked("running", ti) is None  # a worker's or the scheduler's own failure
    assert (
        kill_listener.marked(None, MarkedTaskInstance("failed", None, trigger_id=None)) is None
    )  # not deferred
    assert kill_listener.marked(None, other) is None

    assert hook.get_job(PYTORCH, "left-alone", "default")["metadata"]["uid"] == job["metadata"]["uid"]


def test_a_failed_delete_is_logged_not_raised(hook, cluster, caplog):
    job = hook.run(create_job(hook.async_hook, PYTORCH, job_body("unreachable"), "default"))
    ti = deferred_on(job, "failed", kubernetes_conn_id="no_such_connection")

    settle(kill_listener.marked(None, ti))

    assert "Could not delete PyTorchJob default/unreachable" in caplog.text
    assert hook.get_job(PYTORCH, "unreachable", "default") is not None


def test_every_airflow_component_loads_the_plugin_and_its_listener():
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "plugins", "--output", "json"],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    ).stdout
    listing = next(line for line in out.splitlines() if line.startswith("["))  # after any log lines
    plugins = {p["name"]: p for p in json.loads(listing)}
    assert plugins["training"]["listeners"] == ["airflow_provider_training.plugins.kill_listener"]
    assert kill_listener in TrainingPlugin.listeners
