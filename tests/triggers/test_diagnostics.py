"""Pure readings of pods, events and events into messages."""

from __future__ import annotations

from airflow_provider_training import diagnostics as diag
from airflow_provider_training.kinds.base import JobState, JobStatus, ReplicaCounts
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.outcome import WaitEvent
from airflow_provider_training.results import build_result, failure_message

PYTORCH = get_kind("PyTorchJob")
# The payload form of a failed master replica, as diagnostics.replica_failures reads it.
MASTER_FAILED = {
    "pod": "j-master-0",
    "replica_type": "Master",
    "index": 0,
    "container": "pytorch",
    "exit_code": 3,
    "reason": "Error",
    "message": "",
    "restarts": 0,
}


def pod(name, rtype, index, *, phase="Running", statuses=(), conditions=()):
    labels = {"training.kubeflow.org/replica-type": rtype, "training.kubeflow.org/replica-index": str(index)}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "pytorch"}]},
        "status": {"phase": phase, "containerStatuses": list(statuses), "conditions": list(conditions)},
    }


def test_stuck_reasons():
    unschedulable = pod(
        "p",
        "worker",
        0,
        phase="Pending",
        conditions=[
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
        ],
    )
    backoff = pod(
        "q",
        "worker",
        1,
        phase="Pending",
        statuses=[
            {
                "name": "pytorch",
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
            }
        ],
    )
    creating = pod(
        "r",
        "worker",
        2,
        phase="Pending",
        statuses=[{"name": "pytorch", "state": {"waiting": {"reason": "ContainerCreating"}}}],
    )
    assert diag.stuck_reasons(unschedulable) == [("Unschedulable", "0/3 nodes")]
    assert diag.stuck_reasons(backoff) == [("CrashLoopBackOff", "container pytorch: back-off 10s")]
    assert diag.stuck_reasons(creating) == []


def test_replica_failures_use_the_current_or_previous_run():
    ended = pod(
        "j-master-0",
        "master",
        0,
        phase="Failed",
        statuses=[{"name": "pytorch", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}],
    )
    crashlooping = pod(
        "j-worker-0",
        "worker",
        0,
        statuses=[
            {
                "name": "pytorch",
                "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            }
        ],
    )
    fine = pod(
        "j-worker-1",
        "worker",
        1,
        phase="Succeeded",
        statuses=[{"name": "pytorch", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
    )
    failures = diag.replica_failures(PYTORCH, [ended, crashlooping, fine])
    assert [(f.pod, f.replica_type, f.exit_code, f.reason) for f in failures] == [
        ("j-master-0", "Master", 3, "Error"),
        ("j-worker-0", "Worker", 137, "OOMKilled"),
    ]
    assert failures[1].restarts == 4
    assert failures[0].to_dict() == MASTER_FAILED  # as it goes into the wait event's payload


def test_warning_events_are_recent_warnings_oldest_first():
    events = [
        {"type": "Normal", "reason": "Pulled", "lastTimestamp": "2026-01-01T00:00:01Z", "involvedObject": {}},
        {
            "type": "Warning",
            "reason": "BackOff",
            "message": "b",
            "lastTimestamp": "2026-01-01T00:00:03Z",
            "count": 5,
            "involvedObject": {"kind": "Pod", "name": "p"},
        },
        {
            "type": "Warning",
            "reason": "Failed",
            "message": "a",
            "lastTimestamp": "2026-01-01T00:00:02Z",
            "involvedObject": {"kind": "Pod", "name": "p"},
        },
    ]
    warnings = diag.warning_events(events)
    assert [w["reason"] for w in warnings] == ["Failed", "BackOff"]
    assert diag.format_events(warnings) == ["Pod/p: Failed: a", "Pod/p: BackOff: b (x5)"]


def test_replica_table():
    status = JobStatus(
        JobState.RUNNING, replicas={"Worker": ReplicaCounts(4, 3, 0, 1), "Master": ReplicaCounts(1, 1)}
    )
    assert diag.replica_table(status).splitlines() == [
        "TYPE    DESIRED  ACTIVE  SUCCEEDED  FAILED",
        "Master  1        1       0          0",
        "Worker  4        3       0          1",
    ]


def test_failure_message_and_result():
    event = {
        "status": "failed",
        "job": {
            "name": "j",
            "namespace": "ns",
            "uid": "u",
            "kind": "PyTorchJob",
            "api_version": "kubeflow.org/v1",
        },
        "job_status": JobStatus(JobState.FAILED, "PyTorchJobFailed", "1 Master replica(s) failed.").to_dict(),
        "message": "1 Master replica(s) failed.",
        "pods": ["j-master-0"],
        "replica_failures": [MASTER_FAILED],
        "log_tail": {"j-master-0": ["step 1", "ValueError: bad batch"]},
        "events": [{"object": "Pod/j-master-0", "reason": "BackOff", "message": "restarting", "count": 1}],
    }
    message = failure_message(WaitEvent.from_payload(event))
    assert message.splitlines()[0] == "PyTorchJob ns/j failed: 1 Master replica(s) failed."
    assert "Job status: state Failed, reason PyTorchJobFailed" in message
    assert "master-0 (pod j-master-0, container pytorch): exit code 3, reason Error" in message
    assert "    | ValueError: bad batch" in message
    assert "Pod/j-master-0: BackOff: restarting" in message
    result = build_result(WaitEvent.from_payload(event))
    assert result["state"] == "Failed" and result["pods"] == ["j-master-0"] and result["uid"] == "u"
