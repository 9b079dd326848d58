"""EDL TrainingJob status from its children alone (the resource-lineage controller never writes status), and
from ``status.phase`` where the CRD lineage's updater writes it. Children are shaped as the controller
creates them (reference sections 5 and 8) and as batch/v1 and the ReplicaSet controller report them."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from localkube.selectors import labels_match, parse_label_selector

from airflow_provider_training.kinds import BATCH_JOBS, PODS, REPLICASETS, JobState, get_kind
from airflow_provider_training.kinds.common import OPERATOR_NOT_RUNNING
from airflow_provider_training.kinds.paddle_edl import read_status

CREATED_AT = "2026-03-02T10:00:00Z"
KIND = get_kind("TrainingJob")


def training_job(fault_tolerant: bool = True, low: int = 2, high: int = 10, **status: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "paddlepaddle.org/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "example", "namespace": "default", "creationTimestamp": CREATED_AT},
        "spec": {
            "image": "paddlepaddle/edl-example",
            "port": 7164,
            "ports_num": 1,
            "ports_num_for_sparse": 1,
            "fault_tolerant": fault_tolerant,
            "passes": 1,
            "trainer": {
                "entrypoint": "python /workspace/train_ft.py",
                "min-instance": low,
                "max-instance": high,
            },
            "pserver": {"min-instance": 2, "max-instance": 2},
            "master": {},
        },
    }
    if status:
        job["status"] = status
    return job


def trainer_job(parallelism: int = 2, **observed: Any) -> dict[str, Any]:
    """``<job>-trainer`` with labels as the API server defaults them from the template."""
    labels = {"paddle-job": "example"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "example-trainer", "namespace": "default", "labels": labels},
        "spec": {"parallelism": parallelism, "template": {"metadata": {"labels": labels}}},
        "status": {"startTime": "2026-03-02T10:00:05Z", **observed},
    }


def replica_set(name: str, label: str, replicas: int, ready: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {label: "example"}}}},
        "status": {"replicas": ready},
    }


def pod(name: str, label: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {label: "example"}}, "status": {"phase": phase}}


def children(trainer: dict[str, Any] | None, *pods: dict[str, Any], sets: bool = True) -> dict[str, list]:
    return {
        BATCH_JOBS.key: [trainer] if trainer else [],
        REPLICASETS.key: [
            replica_set("example-pserver", "paddle-job-pserver", 2, 2),
            replica_set("example-master", "paddle-job-master", 1, 1),
        ]
        if sets
        else [],
        PODS.key: list(pods),
    }


RUNNING_TRAINERS = (
    pod("example-trainer-abcde", "paddle-job", "Running"),
    pod("example-trainer-fghij", "paddle-job", "Running"),
)


def test_empty_status_is_running_then_succeeded_from_children_alone():
    job = training_job()
    assert "status" not in job
    pending = read_status(
        job, children(trainer_job(active=2), pod("example-trainer-abcde", "paddle-job", "Pending"))
    )
    assert (pending.state, pending.reason) == (JobState.PENDING, "TrainersPending")
    running = read_status(job, children(trainer_job(active=2), *RUNNING_TRAINERS))
    assert (running.state, running.reason) == (JobState.RUNNING, "TrainersRunning")
    assert "2 trainer pod(s) running" in running.message
    done = read_status(job, children(trainer_job(succeeded=1, completionTime="2026-03-02T10:09:00Z")))
    assert (done.state, done.reason) == (JobState.SUCCEEDED, "TrainersSucceeded")
    assert done.end == datetime(2026, 3, 2, 10, 9, tzinfo=UTC)
    assert done.start == datetime(2026, 3, 2, 10, 0, 5, tzinfo=UTC)


def test_fault_tolerant_rules():
    job = training_job(fault_tolerant=True)
    one_failed = read_status(job, children(trainer_job(active=1, failed=1), RUNNING_TRAINERS[0]))
    assert one_failed.state == JobState.RUNNING
    still_active = read_status(job, children(trainer_job(active=1, succeeded=1), RUNNING_TRAINERS[0]))
    assert still_active.state == JobState.RUNNING
    all_failed = read_status(job, children(trainer_job(failed=2)))
    assert (all_failed.state, all_failed.reason) == (JobState.FAILED, "TrainersFailed")
    assert "parallelism 2" in all_failed.message and "failed 2" in all_failed.message


def test_non_fault_tolerant_rules():
    job = training_job(fault_tolerant=False, low=3, high=3)
    one_failed = read_status(job, children(trainer_job(parallelism=3, active=2, failed=1), *RUNNING_TRAINERS))
    assert (one_failed.state, one_failed.reason) == (JobState.FAILED, "TrainerFailed")
    some_done = read_status(
        job, children(trainer_job(parallelism=3, active=1, succeeded=2), RUNNING_TRAINERS[0])
    )
    assert some_done.state == JobState.RUNNING
    all_done = read_status(job, children(trainer_job(parallelism=3, succeeded=3)))
    assert all_done.state == JobState.SUCCEEDED


def test_a_trainer_job_the_batch_controller_gave_up_on_has_failed():
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
        "lastTransitionTime": "2026-03-02T10:07:00Z",
    }
    status = read_status(training_job(), children(trainer_job(active=0, failed=1, conditions=[failed])))
    assert (status.state, status.reason) == (JobState.FAILED, "TrainerJobFailed")
    assert "backoff limit" in status.message
    assert status.end == datetime(2026, 3, 2, 10, 7, tzinfo=UTC)


def test_elastic_job_shows_its_current_parallelism():
    status = read_status(
        training_job(low=2, high=10), children(trainer_job(parallelism=4, active=4), *RUNNING_TRAINERS)
    )
    assert status.replicas["TRAINER"].to_dict() == {"desired": 4, "active": 4, "succeeded": 0, "failed": 0}
    assert "elastic: 4 trainers (min-instance 2, max-instance 10)" in status.message
    fixed = read_status(training_job(low=2, high=2), children(trainer_job(active=2), *RUNNING_TRAINERS))
    assert "elastic" not in fixed.message


def test_replica_table_has_trainer_pserver_and_master():
    pserver_pods = [pod(f"example-pserver-{i}", "paddle-job-pserver", "Running") for i in "ab"]
    status = read_status(training_job(), children(trainer_job(active=2), *RUNNING_TRAINERS, *pserver_pods))
    assert {t: c.to_dict() for t, c in status.replicas.items()} == {
        "TRAINER": {"desired": 2, "active": 2, "succeeded": 0, "failed": 0},
        "PSERVER": {"desired": 2, "active": 2, "succeeded": 0, "failed": 0},
        "MASTER": {"desired": 1, "active": 1, "succeeded": 0, "failed": 0},
    }


def test_no_trainer_job_after_the_grace_period_means_the_controller_is_not_running():
    job = training_job()
    young = read_status(job, {}, now=datetime(2026, 3, 2, 10, 0, 20, tzinfo=UTC))
    assert (young.state, young.stalled) == (JobState.PENDING, False)
    old = read_status(job, children(None, sets=False), now=datetime(2026, 3, 2, 10, 3, tzinfo=UTC))
    assert (old.state, old.stalled, old.reason) == (JobState.PENDING, True, OPERATOR_NOT_RUNNING)
    assert "no trainer Job example-trainer" in old.message
    assert "EDL controller seems not to be running" in old.message


@pytest.mark.parametrize(
    ("phase", "reason", "state"),
    [
        ("creating", "", JobState.PENDING),
        ("running", "", JobState.RUNNING),
        ("succeeded", "all trainer have succeeded!", JobState.SUCCEEDED),
        ("failed", "at least one trainer failed!", JobState.FAILED),
    ],
)
def test_crd_lineage_phase_wins(phase, reason, state):
    job = training_job(phase=phase, reason=reason, scale_status={})
    status = read_status(job, children(trainer_job(active=2), *RUNNING_TRAINERS))
    assert status.state == state
    assert status.reason == phase.capitalize()
    if reason:
        assert status.message.startswith(reason)


def test_crd_lineage_replica_statuses_fill_in_without_children():
    job = training_job(
        phase="running",
        replica_statuses=[
            {"training_resource_type": "TRAINER", "state": "running", "resource_states": {"running": 3}},
            {"training_resource_type": "PSERVER", "state": "running", "resource_states": {"running": 2}},
        ],
    )
    replicas = read_status(job, {}).replicas
    assert replicas["TRAINER"].active == 3 and replicas["PSERVER"].active == 2


def test_children_are_read_and_deleted_and_found_by_name_or_label():
    by_resource: dict[str, list[str]] = {}
    for child in KIND.children:
        assert child.needed_for_status and child.delete_on_cleanup
        by_resource.setdefault(child.resource.key, []).append(child.selector("example"))
    assert by_resource == {
        "jobs.batch": ["paddle-job=example"],
        "replicasets.apps": ["paddle-job-pserver=example", "paddle-job-master=example"],
        "pods": ["paddle-job=example", "paddle-job-pserver=example", "paddle-job-master=example"],
    }
    names = sorted(child.name("example") for child in KIND.children if child.name is not None)
    assert names == ["example-master", "example-pserver", "example-trainer"]


def test_pods_of_every_replica_type():
    trainer = pod("example-trainer-abcde", "paddle-job", "Running")
    master = pod("example-master-xyz12", "paddle-job-master", "Running")
    other = copy.deepcopy(trainer)
    other["metadata"]["labels"] = {"paddle-job": "example2"}
    assert labels_match(parse_label_selector(KIND.pod_selector("example")), trainer)
    assert not labels_match(parse_label_selector(KIND.pod_selector("example")), other)
    assert KIND.master_selector("example") == "paddle-job=example"
    extra = [parse_label_selector(s) for s in KIND.extra_pod_selectors("example")]
    assert any(labels_match(s, master) for s in extra)
    assert [KIND.replica_of_pod(p).replica_type for p in (trainer, master)] == ["TRAINER", "MASTER"]
    assert KIND.replica_of_pod(trainer).index is None


def test_identity():
    assert (KIND.api_version, KIND.resource.plural, KIND.family) == (
        "paddlepaddle.org/v1",
        "trainingjobs",
        "paddle-edl",
    )
    assert KIND.replica_spec_key is None
    assert KIND.default_container == "trainer"
