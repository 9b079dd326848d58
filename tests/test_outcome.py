"""The typed wait result: payload round trips, and payloads of earlier versions read back."""

from __future__ import annotations

import json

import pytest

from airflow_provider_training.kinds import JobState, JobStatus, get_kind
from airflow_provider_training.kinds.base import ReplicaCounts
from airflow_provider_training.outcome import JobRef, Outcome, ReplicaFailure, WaitEvent
from airflow_provider_training.results import build_result, failure_message

JOB = {
    "name": "mnist",
    "namespace": "ml",
    "uid": "u-1",
    "kind": "PyTorchJob",
    "api_version": "kubeflow.org/v1",
}
STATUS = JobStatus(
    JobState.FAILED, "PyTorchJobFailed", "1 Master replica(s) failed.", {"Master": ReplicaCounts(1, 0, 0, 1)}
).to_dict()
FAILED = {
    "status": "failed",
    "job": JOB,
    "job_status": STATUS,
    "message": "1 Master replica(s) failed.",
    "pods": ["mnist-master-0", "mnist-worker-0"],
    "replica_failures": [
        {
            "pod": "mnist-master-0",
            "replica_type": "Master",
            "index": 0,
            "container": "pytorch",
            "exit_code": None,
            "reason": "Error",
            "message": "",
            "restarts": 2,
            "source": "events",
            "exit_code_unknown": "the pod was deleted before it could be read",
        },
        {
            "pod": None,
            "replica_type": "Worker",
            "index": None,
            "container": None,
            "exit_code": None,
            "reason": "",
            "message": "exit code unknown",
            "restarts": 0,
            "count": 3,
        },
        {
            "pod": "mnist-worker-1",
            "replica_type": "Worker",
            "index": 1,
            "container": "pytorch",
            "exit_code": 137,
            "reason": "OOMKilled",
            "message": "",
            "restarts": 0,
            "log": "the pod was deleted before its log could be read",
        },
    ],
    "log_tail": {"mnist-master-0": ["step 9", "ValueError: bad batch"]},
    "events": [
        {"object": "Pod/mnist-master-0", "reason": "BackOff", "message": "x", "count": 2, "time": "t"}
    ],
    "notes": ["the rest of master-0's log could not be read: gone"],
}


@pytest.mark.parametrize("outcome", list(Outcome))
def test_the_payload_round_trips_for_every_outcome(outcome):
    payload = {**FAILED, "status": outcome.value}

    event = WaitEvent.from_payload(payload)

    assert event.outcome is outcome and event.succeeded == (outcome is Outcome.SUCCESS)
    assert event.to_payload() == payload  # the trigger payload keeps its shape, key for key
    assert json.loads(json.dumps(event.to_payload())) == payload  # plain JSON
    assert WaitEvent.from_payload(event.to_payload()) == event


def test_the_parts_are_typed():
    event = WaitEvent.from_payload(FAILED)

    assert event.job == JobRef("mnist", "ml", "u-1", "PyTorchJob", "kubeflow.org/v1")
    assert event.state is JobState.FAILED
    master, workers, oom = event.replica_failures
    assert isinstance(master, ReplicaFailure) and master.source == "events" and master.where == "master-0"
    assert workers.count == 3 and workers.pod is None and workers.where == "Worker"
    assert oom.exit_code == 137 and oom.log and oom.count is None


def test_a_replica_failure_keeps_only_the_optional_keys_it_has():
    plain = {k: v for k, v in FAILED["replica_failures"][2].items() if k != "log"}
    assert ReplicaFailure.from_dict(plain).to_dict() == plain  # no "source", "count", ... added


def test_payloads_of_earlier_versions_read_back():
    """The event of a trigger killed while away and the old wait_until=None snapshot had fewer keys."""
    killed = {"status": "error", "job": JOB, "message": "The task instance is failed, no longer deferred"}
    snapshot = {"status": "success", "job": JOB, "job_status": STATUS, "pods": []}

    assert WaitEvent.from_payload(killed) == WaitEvent(
        Outcome.ERROR, JobRef.from_dict(JOB), killed["message"]
    )
    assert build_result(WaitEvent.from_payload(snapshot))["state"] == "Failed"
    assert WaitEvent.from_payload({"status": "error"}).job is None


def test_the_message_and_the_result_read_the_typed_event():
    event = WaitEvent.from_payload(FAILED)

    text = failure_message(event)

    assert text.splitlines()[0] == "PyTorchJob ml/mnist failed: 1 Master replica(s) failed."
    assert (
        "  master-0 (pod mnist-master-0, container pytorch): exit code unknown: the pod was deleted" in text
    )
    assert "  Worker: 3 failed, exit code unknown" in text
    assert "    no log lines: the pod was deleted before its log could be read" in text
    assert "    | ValueError: bad batch" in text
    assert build_result(event)["pods"] == FAILED["pods"]


def test_a_reference_of_a_job_object():
    kind = get_kind("PyTorchJob")
    job = {"metadata": {"name": "mnist", "namespace": "ml", "uid": "u-1"}}

    ref = JobRef.of(kind, job)

    assert (
        ref.to_dict() == JOB and JobRef.from_dict(ref.to_dict()) == ref and ref.label == "PyTorchJob ml/mnist"
    )
