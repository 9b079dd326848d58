"""TrainingJobTrigger directly: serialization, on_kill/cleanup, stuck replicas, deadlines, target states."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_training.job_wait import FinishOptions, JobWait, WaitOptions
from airflow_provider_training.kinds.base import JobState
from airflow_provider_training.outcome import JobRef
from airflow_provider_training.triggers.training import TrainingJobTrigger
from tests.operators.harness import (
    KIND_BY_NAME,
    NAMESPACE,
    job_or_none,
    manifest,
    resource,
    wait_for,
    watching,
)

pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine
PYTORCH = KIND_BY_NAME["PyTorchJob"]


def create(cluster, name, script, case=PYTORCH, **options):
    body = manifest(case, script, name=name, **options)
    return cluster.store.create(resource(cluster, case), NAMESPACE, body)


def trigger_for(name, **kwargs):
    kwargs.setdefault("check_interval", 0.1)
    return TrainingJobTrigger(
        kind="PyTorchJob", api_version="kubeflow.org/v1", job_name=name, namespace=NAMESPACE, **kwargs
    )


async def first(trigger):
    agen = trigger.run()
    try:
        return dict((await anext(agen)).payload)
    finally:
        await agen.aclose()


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"uid": "0b1c", "target_state": "Running", "get_logs": False, "log_replicas": ["Worker", "Master"]},
        {"deadline": "2026-11-29T13:00:00+00:00", "startup_timeout": 30.0, "kubernetes_conn_id": None},
        {"allow_missing": True, "status_grace_period": 5.0, "check_interval": 1.5, "log_replicas": "all"},
        {"log_replicas": "all", "max_log_streams": 200},
        {"on_kill_action": "keep"},
        {"on_kill_action": "delete"},
        {"max_restarts": 0},
        {"max_restarts": 5},
    ],
)
def test_serialize_round_trip(kwargs):
    trigger = trigger_for("job-a", **kwargs)
    classpath, serialized = trigger.serialize()
    assert classpath == "airflow_provider_training.triggers.training.TrainingJobTrigger"
    assert type(trigger)(**serialized).serialize() == (classpath, serialized)
    assert json.loads(json.dumps(serialized)) == serialized  # plain values only
    assert list(serialized) == ["job_wait"]  # one value: the job, the wait options, the finish options
    loaded = type(trigger)(**serialized).job_wait
    assert loaded == trigger.job_wait
    assert loaded.finish.on_kill_action == kwargs.get("on_kill_action", "delete")
    assert loaded.wait.max_restarts == kwargs.get("max_restarts")  # None: no limit (sensors)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"target_state": "Failed"}, "target_state"),
        ({"on_kill_action": "keep_pod"}, "on_kill_action"),
        ({"max_log_streams": 0}, "max_log_streams"),
        ({"max_restarts": -1}, "max_restarts"),
    ],
)
def test_choices_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        trigger_for("job-a", **kwargs)


async def test_on_kill_deletes_the_job_and_cleanup_does_not(cluster):
    create(cluster, "kill-me", {"default": {"duration": None}})
    trigger = trigger_for("kill-me")

    await trigger.cleanup()  # also runs on a triggerer restart: must leave the job alone
    assert job_or_none(cluster, PYTORCH, "kill-me") is not None

    await trigger.on_kill()
    wait_for(lambda: job_or_none(cluster, PYTORCH, "kill-me") is None)
    await trigger.on_kill()  # already gone: no error


@pytest.mark.parametrize("action", ["delete", "keep"])
async def test_on_kill_of_a_waiting_trigger_honours_on_kill_action(cluster, action):
    name = f"kill-{action}"
    uid = create(cluster, name, {"default": {"duration": None}})["metadata"]["uid"]
    since = len(cluster.requests)
    trigger = trigger_for(name, uid=uid, on_kill_action=action, get_logs=False)
    waiting = asyncio.create_task(first(trigger))
    while not watching(cluster, PYTORCH, since):  # the trigger follows the job
        await asyncio.sleep(0.02)

    await trigger.on_kill()

    deletes = [r for r in cluster.requests[since:] if r.method == "DELETE" and r.path.endswith(f"/{name}")]
    if action == "delete":
        assert len(deletes) == 1
        event = await waiting  # the wait sees its job go
        assert event["status"] == "deleted"
        wait_for(lambda: job_or_none(cluster, PYTORCH, name) is None)
    else:
        assert deletes == []
        assert job_or_none(cluster, PYTORCH, name)["metadata"]["uid"] == uid
        assert not waiting.done()  # still waiting on the job
        waiting.cancel()
        await trigger_for(name).on_kill()


async def warned(capsys, name: str, warning: str) -> str:
    """Run a wait on job ``name`` whose deadline is far away until it logs ``warning`` (a gate, bounded as a
    guard; not a deadline the trigger must beat on a busy machine), then cancel it; returns its output."""
    waiting = asyncio.create_task(first(trigger_for(name, deadline=_in(600))))
    out = ""
    for _ in range(1200):
        out += capsys.readouterr().out
        if warning in out or waiting.done():
            break
        await asyncio.sleep(0.05)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    return out + capsys.readouterr().out


async def test_stuck_replicas_are_warned_once_with_their_events(cluster, capsys):
    create(cluster, "stuck-pull", {"Master": {"pending": "ImagePullBackOff"}, "default": {"duration": None}})
    warning = "Replica pod stuck-pull-master-0 of PyTorchJob default/stuck-pull is stuck: ImagePull"

    out = await warned(capsys, "stuck-pull", warning)
    assert out.count(warning) == 1, out
    assert "Failed to pull image" in out  # the pod's Warning events come with the warning

    # The timeout names what kept the replica from starting: its events (a deadline already past).
    event = await first(trigger_for("stuck-pull", deadline=_in(-1)))
    assert event["status"] == "timeout"
    assert any(e["reason"] == "Failed" for e in event["events"])
    await trigger_for("stuck-pull").on_kill()


async def test_unschedulable_replicas_are_named_in_the_timeout(cluster, capsys):
    create(cluster, "stuck-sched", {"Worker": {"pending": "Unschedulable"}, "default": {"duration": None}})

    assert "is stuck: Unschedulable" in await warned(capsys, "stuck-sched", "is stuck: Unschedulable")

    event = await first(trigger_for("stuck-sched", startup_timeout=60.0, deadline=_in(-1)))
    assert event["status"] == "timeout"
    assert event["job_status"]["state"] == "Running"  # the master runs; the deadline ended the wait
    await trigger_for("stuck-sched").on_kill()


async def test_past_deadline_times_out_at_once(cluster):
    create(cluster, "late", {"default": {"duration": None}})

    event = await first(trigger_for("late", deadline=_in(-1)))

    assert event["status"] == "timeout" and "deadline" in event["message"]
    assert event["job"]["name"] == "late" and event["job"]["uid"]
    await trigger_for("late").on_kill()


async def test_target_running(cluster):
    create(cluster, "run-target", {"default": {"duration": None}})

    event = await first(trigger_for("run-target", target_state="Running"))

    assert event["status"] == "success" and event["job_status"]["state"] == "Running"
    await trigger_for("run-target").on_kill()


async def test_missing_job_is_deleted_unless_allowed(cluster):
    event = await first(trigger_for("never-created"))
    assert event["status"] == "deleted" and "does not exist" in event["message"]


async def test_a_replaced_job_counts_as_deleted(cluster):
    create(cluster, "replaced", {"default": {"duration": 0.05}})

    event = await first(trigger_for("replaced", uid="uid-of-an-earlier-object"))

    assert event["status"] == "deleted"
    await trigger_for("replaced").on_kill()


async def test_a_job_marked_failed_after_its_deletion_began_counts_as_deleted(cluster):
    """A foreground delete (on_kill's) keeps the job while its pods go, and its operator may mark it Failed
    for the lost replicas before it is gone (the real tier saw it): the wait ends as deleted, not failed."""
    rt = resource(cluster, PYTORCH)
    body = manifest(PYTORCH, {"default": {"duration": None}}, name="doomed")
    body["metadata"]["finalizers"] = ["example.com/hold"]  # keeps it, deletionTimestamp set, until removed
    # No controller writes its status: localkube's would, from a read taken before the delete, over the
    # Failed written below (it did under load). Here the test alone plays the operator.
    body["spec"].setdefault("runPolicy", {})["managedBy"] = "kueue.x-k8s.io/multikueue"
    cluster.store.create(rt, NAMESPACE, body)
    cluster.store.delete(rt, NAMESPACE, "doomed")
    failed = {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed", "message": "1 Worker failed."}
    cluster.store.update_status(rt, NAMESPACE, "doomed", {"conditions": [failed]})

    event = await first(trigger_for("doomed", get_logs=False))

    assert event["status"] == "deleted", event
    assert "was deleted while waiting (then marked: 1 Worker failed.)" in event["message"], event
    patch = {"metadata": {"finalizers": []}}
    cluster.store.patch(rt, NAMESPACE, "doomed", patch, "application/merge-patch+json")


def _in(seconds):
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


async def test_a_wait_that_cannot_run_is_an_error_event(cluster, monkeypatch, tmp_path):
    missing = tmp_path / "no-such-kubeconfig"
    monkeypatch.setenv(
        "AIRFLOW_CONN_BROKEN_CLUSTER",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(missing)}}),
    )

    event = await first(trigger_for("any-job", kubernetes_conn_id="broken_cluster"))

    assert event["status"] == "error"
    assert event["message"] and event["job"]["name"] == "any-job"


# What TrainingJobTrigger.serialize() returned before its arguments became one JobWait (main at 53df9b2), for
# a deferrable operator's task, and before check_interval was named (173856e): trigger rows in the metadata DB
# of tasks deferred before an upgrade.
SERIALIZED_BEFORE_JOB_WAIT = {
    "kind": "PyTorchJob",
    "api_version": "kubeflow.org/v1",
    "job_name": "train-7f3a",
    "namespace": "ml",
    "uid": "0b1c-77",
    "kubernetes_conn_id": "k8s",
    "target_state": "Succeeded",
    "get_logs": True,
    "log_replicas": ["Master", "Worker"],
    "max_log_streams": 200,
    "deadline": "2026-11-29T13:00:00+00:00",
    "startup_timeout": 600.0,
    "status_grace_period": 60.0,
    "check_interval": 5.0,
    "allow_missing": False,
    "on_kill_action": "delete",
    "end_from_trigger": True,
    "on_finish_action": "delete_succeeded",
    "push_result": True,
    "return_value_from_log": True,
    "multiple_outputs": False,
    "try_number": 2,
    "max_restarts": 3,
}
SERIALIZED_BEFORE_CHECK_INTERVAL = {
    "kind": "PyTorchJob",
    "api_version": "kubeflow.org/v1",
    "job_name": "train-7f3a",
    "namespace": "ml",
    "uid": "0b1c-77",
    "kubernetes_conn_id": "k8s",
    "target_state": "Succeeded",
    "get_logs": True,
    "log_replicas": "deciding",
    "max_log_streams": None,
    "deadline": "2026-11-29T13:00:00+00:00",
    "startup_timeout": 600.0,
    "status_grace_period": 60.0,
    "poll_interval": 2.5,
    "allow_missing": False,
    "on_kill_action": "delete",
    "end_from_trigger": False,
    "on_finish_action": "keep",
    "push_result": True,
}


def test_a_trigger_serialized_before_its_arguments_were_one_value_loads_as_it_was():
    """A task deferred by the previous version goes on after an upgrade: its flat arguments become the same
    JobWait, and the trigger serializes it in the new shape from then on."""
    loaded = TrainingJobTrigger(**SERIALIZED_BEFORE_JOB_WAIT)

    assert loaded.job_wait == JobWait(
        JobRef("train-7f3a", "ml", "0b1c-77", "PyTorchJob", "kubeflow.org/v1"),
        "k8s",
        WaitOptions(
            target=JobState.SUCCEEDED,
            deadline=datetime(2026, 11, 29, 13, tzinfo=UTC),
            startup_timeout=600.0,
            status_grace_period=60.0,
            check_interval=5.0,
            get_logs=True,
            log_replicas=["Master", "Worker"],
            max_log_streams=200,
            max_restarts=3,
        ),
        FinishOptions(
            on_finish_action="delete_succeeded",
            on_kill_action="delete",
            end_from_trigger=True,
            push_result=True,
            return_value_from_log=True,
        ),
        try_number=2,
    )
    assert TrainingJobTrigger(**loaded.serialize()[1]).job_wait == loaded.job_wait


def test_a_trigger_serialized_before_check_interval_was_named_still_loads():
    """Triggers serialized by earlier versions carry ``poll_interval``; the triggerer still builds them."""
    loaded = TrainingJobTrigger(**SERIALIZED_BEFORE_CHECK_INTERVAL)

    assert loaded.job_wait.wait.check_interval == 2.5
    assert loaded.job_wait.finish == FinishOptions()


def test_a_trigger_serialized_before_max_restarts_loads_without_a_limit():
    """A trigger deferred by an earlier version goes on as it waited: no restart limit (nor try check)."""
    loaded = TrainingJobTrigger(**SERIALIZED_BEFORE_CHECK_INTERVAL)

    assert loaded.job_wait.wait.max_restarts is None and loaded.job_wait.try_number is None


def test_an_unknown_earlier_argument_is_refused():
    with pytest.raises(TypeError, match=r"unexpected keyword argument.*wait_for_it"):
        TrainingJobTrigger(**{**SERIALIZED_BEFORE_JOB_WAIT, "wait_for_it": True})


def test_triggers_log_through_their_class_logger_unless_given_their_own():
    """One logger for every trigger of the class (a logger each was 1 KiB per deferred task; the triggerer
    routes a record by the context it is logged in); a trigger given its own (``_log``) keeps it."""
    first, second = trigger_for("first"), trigger_for("second")
    own = logging.getLogger("tests.own")

    assert first.log is second.log is TrainingJobTrigger.logger()
    assert "_log" not in vars(first)  # nothing of its own was made
    second._log = own
    assert second.log is own and first.log is not own
