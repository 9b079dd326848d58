"""A failed job as the Kubeflow operator leaves it when its pods are gone: what the provider still reads
from its status and its events (recorded objects, written from the reference)."""

from __future__ import annotations

from airflow_provider_training import diagnostics as diag
from airflow_provider_training.kinds.base import JobState
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.outcome import JobRef, Outcome, WaitEvent
from airflow_provider_training.results import failure_message
from tests.kinds.recorded import cond, job, replica

TF = get_kind("TFJob")
MESSAGE = "Job dist-mnist has failed because it has reached the specified backoff limit"

# Backoff limit reached: the operator sets Failed and deletes the pods, and leaves the replica counts of
# its last pass (the crash-looping replicas counted active, none failed).
TF_BACKOFF_FAILED = job(
    "TFJob",
    "dist-mnist",
    {"tfReplicaSpecs": {"Chief": replica(1), "PS": replica(2), "Worker": replica(3)}},
    {
        "conditions": [
            cond("Created", "True", "TFJobCreated", "TFJob dist-mnist is created."),
            cond("Running", "False", "TFJobRunning", "TFJob dist-mnist is running."),
            cond("Failed", "True", "TFJobFailed", MESSAGE, "2026-03-02T10:09:00Z"),
        ],
        "replicaStatuses": {"Chief": {"active": 1}, "PS": {"active": 2}, "Worker": {"active": 3}},
        "startTime": "2026-03-02T10:00:02Z",
        "completionTime": "2026-03-02T10:09:00Z",
    },
)


def event(type_: str, reason: str, message: str, at: str = "2026-03-02T10:05:00Z") -> dict:
    involved = {"kind": "TFJob", "name": "dist-mnist", "namespace": "default", "uid": "0b1c"}
    return {
        "type": type_,
        "reason": reason,
        "message": message,
        "lastTimestamp": at,
        "involvedObject": involved,
    }


def test_a_failed_job_has_no_active_replicas():
    status = TF.status(TF_BACKOFF_FAILED)
    assert status.state == JobState.FAILED
    assert {t: (c.active, c.failed) for t, c in status.replicas.items()} == {
        "Chief": (0, 1),
        "PS": (0, 2),
        "Worker": (0, 3),
    }
    rows = diag.replica_table(status).splitlines()
    assert rows[0].split() == ["TYPE", "DESIRED", "ACTIVE", "SUCCEEDED", "FAILED"]
    assert [row.split()[2] for row in rows[1:]] == ["0", "0", "0"]


def test_a_succeeded_job_keeps_its_counts():
    from tests.kinds.recorded import TF_SUCCEEDED_PS_RUNNING

    assert TF.status(TF_SUCCEEDED_PS_RUNNING).replicas["PS"].active == 1


def test_failures_in_the_job_events():
    events = [
        event("Normal", "SuccessfulCreatePod", "Created pod: dist-mnist-worker-1"),
        event(
            "Warning",
            "CrashLoopBackOff",
            "Error pod dist-mnist-worker-1 container tensorflow waiting message: back-off 10s restarting",
        ),
        event("Normal", "ExitedWithCode", "Pod: default.dist-mnist-worker-1 exited with code 137"),
        event(
            "Warning",
            "Error",
            "Error pod dist-mnist-ps-0 container tensorflow exitCode: 2 terminated message: oom",
        ),
        event("Normal", "ExitedWithCode", "Pod: default.dist-mnist-chief-0 exited with code 0"),
        event(
            "Warning",
            "CrashLoopBackOff",
            "Error pod dist-mnist-worker-1 container tensorflow waiting message: back-off 20s restarting",
        ),
    ]
    found = {f.pod: f for f in TF.failures_in_events("dist-mnist", events)}
    assert sorted(found) == ["dist-mnist-ps-0", "dist-mnist-worker-1"]  # exit code 0 is no failure
    worker, ps = found["dist-mnist-worker-1"], found["dist-mnist-ps-0"]
    assert (worker.replica_type, worker.index, worker.exit_code) == ("Worker", 1, 137)
    assert ps.to_dict() == {  # as it goes into the wait event's payload
        "pod": "dist-mnist-ps-0",
        "replica_type": "PS",
        "index": 0,
        "container": "tensorflow",
        "exit_code": 2,
        "reason": "Error",
        "message": "oom",
        "restarts": 0,
        "source": "events",
    }
    waiting_only = TF.failures_in_events("dist-mnist", events[1:2])
    assert [(f.pod, f.exit_code, f.reason) for f in waiting_only] == [
        ("dist-mnist-worker-1", None, "CrashLoopBackOff")
    ]


def test_what_is_unknown_is_said_plainly():
    status = TF.status(TF_BACKOFF_FAILED)
    failures = diag.counted_failures(TF, status, pods=[])
    assert failures[0].to_dict() == {  # as it goes into the wait event's payload
        "pod": None,
        "replica_type": "Chief",
        "index": None,
        "container": None,
        "exit_code": None,
        "reason": "",
        "message": "exit code unknown: the pods were deleted before they could be read",
        "restarts": 0,
        "count": 1,
    }
    dist_mnist = JobRef("dist-mnist", "default", None, TF.kind, TF.api_version)
    text = failure_message(
        WaitEvent(Outcome.FAILED, dist_mnist, MESSAGE, status.to_dict(), replica_failures=failures)
    )
    assert "  Worker: 3 failed, exit code unknown: the pods were deleted before they could be read" in text
    assert "  Chief: 1 failed, exit code unknown: the pods were deleted before they could be read" in text
