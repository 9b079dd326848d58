"""The job view's pure parts on recorded objects: stuck-pod warnings, pod rows, events newest first."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_provider_training.kinds.base import JobState, JobStatus
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.plugins.ui_cluster import Snapshot
from airflow_provider_training.plugins.ui_records import TaskRecord
from airflow_provider_training.plugins.ui_views import MAX_EVENTS, job_view

PYTORCH = get_kind("PyTorchJob")
REF = {
    "name": "mnist",
    "namespace": "ml",
    "uid": "j1",
    "kind": "PyTorchJob",
    "api_version": "kubeflow.org/v1",
}


def pod(name: str, rtype: str, status: dict) -> dict:
    labels = {"training.kubeflow.org/replica-type": rtype.lower(), "training.kubeflow.org/replica-index": "0"}
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": labels,
            "creationTimestamp": "2026-12-01T10:00:00Z",
        },
        "spec": {"containers": [{"name": "pytorch"}]},
        "status": status,
    }


PULLING = pod(
    "mnist-worker-0",
    "Worker",
    {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "pytorch",
                "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}},
            }
        ],
    },
)
UNSCHEDULABLE = pod(
    "mnist-master-0",
    "Master",
    {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
        ],
    },
)


def event(n: int) -> dict:
    return {
        "type": "Warning" if n % 2 else "Normal",
        "reason": f"R{n}",
        "message": f"event {n}",
        "involvedObject": {"kind": "Pod", "name": "mnist-worker-0", "uid": "uid-mnist-worker-0"},
        "lastTimestamp": f"2026-12-01T10:{n // 60:02d}:{n % 60:02d}Z",
    }


def test_stuck_pods_rows_and_events():
    status = JobStatus(JobState.PENDING, reason="Created", message="created")
    snapshot = Snapshot(
        job={"metadata": {"name": "mnist", "uid": "j1"}, "status": {}},
        status=status,
        pods=[PULLING, UNSCHEDULABLE],
        events=[event(n) for n in range(80)],
    )
    record = TaskRecord(try_number=1, state="deferred", operator="PyTorchJobOperator", training=True, ref=REF)

    view = job_view(record, PYTORCH, snapshot, None, datetime(2026, 12, 1, 10, 2, tzinfo=UTC))

    assert {(w["pod"], w["reason"]) for w in view["warnings"]} == {
        ("mnist-worker-0", "ImagePullBackOff"),
        ("mnist-master-0", "Unschedulable"),
    }
    rows = {p["replica"]: p for p in view["pods"]}
    assert rows["worker-0"]["reason"] == "ImagePullBackOff" and rows["worker-0"]["warning"].startswith(
        "ImagePull"
    )
    assert rows["master-0"]["warning"] == "Unschedulable: 0/3 nodes" and rows["master-0"]["ready"] is False
    assert len(view["events"]) == MAX_EVENTS and view["events"][0]["message"] == "event 79"
    assert view["events"][0]["object"] == "Pod/mnist-worker-0"
    assert view["status"]["finished"] is False and view["refresh_seconds"] == 5.0
    assert view["job"] == {
        **{k: REF[k] for k in ("kind", "api_version", "namespace", "name", "uid")},
        "link": None,
    }
