"""Legacy MXNet jobs read from objects shaped as the two operators write them (reference B1, B2): a training
failure is ``phase: Done, state: Failed``, ``phase: Failed`` is a setup error, only the chief decides."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from localkube.selectors import labels_match, parse_label_selector

from airflow_provider_training.kinds import JobState, get_kind
from airflow_provider_training.kinds.common import OPERATOR_NOT_RUNNING

MLKUBE = get_kind("MxJob")
V1ALPHA1 = get_kind("MXJob", "kubeflow.org/v1alpha1")
BOTH = pytest.mark.parametrize("kind", [MLKUBE, V1ALPHA1], ids=["mlkube", "v1alpha1"])


def spec_list(**counts: int) -> list[dict[str, Any]]:
    return [
        {
            "replicas": n,
            "mxReplicaType": t,
            "template": {"spec": {"containers": [{"name": "mxnet", "image": "mx"}]}},
        }
        for t, n in counts.items()
    ]


def mx_job(kind, status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {"name": "dist", "namespace": "default", "creationTimestamp": "2026-03-02T10:00:00Z"},
        "spec": {"jobMode": "dist", "replicaSpecs": spec_list(SCHEDULER=1, SERVER=2, WORKER=2), **spec},
    }
    if status is not None:
        obj["status"] = status
    return obj


def replica_statuses(kind, **states: dict[str, int]) -> list[dict[str, Any]]:
    key = "Mx_replica_type" if kind is MLKUBE else "mx_replica_type"
    return [{key: t, "state": next(iter(s), "Unknown"), "ReplicasStates": s} for t, s in states.items()]


@BOTH
def test_done_with_state_failed_is_a_failure(kind):
    status = kind.read_status(mx_job(kind, {"phase": "Done", "state": "Failed", "reason": ""}), {})
    assert (status.state, status.reason) == (JobState.FAILED, "Failed")
    assert "chief replica" in status.message


@BOTH
def test_done_with_state_succeeded(kind):
    status = kind.read_status(mx_job(kind, {"phase": "Done", "state": "Succeeded"}), {})
    assert status.state == JobState.SUCCEEDED


@BOTH
def test_phase_failed_is_a_setup_error(kind):
    reason = "Could not create in memory datastructures; invalid replica spec"
    status = kind.read_status(mx_job(kind, {"phase": "Failed", "state": "Failed", "reason": reason}), {})
    assert (status.state, status.reason) == (JobState.FAILED, "SetupFailed")
    assert "at setup" in status.message and reason in status.message


@BOTH
@pytest.mark.parametrize(
    ("phase", "state", "expected"),
    [
        ("Creating", "Running", JobState.PENDING),
        ("Running", "Running", JobState.RUNNING),
        ("CleanUp", "Running", JobState.RUNNING),  # deleted while running (mlkube)
        ("CleanUp", "Failed", JobState.FAILED),  # the chief failed; pods are being cleaned up (v1alpha1)
        ("CleanUp", "Succeeded", JobState.SUCCEEDED),
    ],
)
def test_phases(kind, phase, state, expected):
    assert kind.read_status(mx_job(kind, {"phase": phase, "state": state}), {}).state == expected


def test_only_the_chief_decides():
    # A failed SERVER replica does not fail the job while the operator (i.e. the chief) says Running.
    status_body = {
        "phase": "Running",
        "state": "Running",
        "replicaStatuses": replica_statuses(
            V1ALPHA1, SCHEDULER={"Running": 1}, SERVER={"Failed": 1, "Running": 1}
        ),
    }
    running = V1ALPHA1.read_status(mx_job(V1ALPHA1, status_body), {})
    assert running.state == JobState.RUNNING
    assert running.replicas["SERVER"].failed == 1
    chief = {"terminationPolicy": {"chief": {"replicaName": "SCHEDULER", "replicaIndex": 0}}}
    failed = V1ALPHA1.read_status(mx_job(V1ALPHA1, {"phase": "Done", "state": "Failed"}, **chief), {})
    assert "the chief replica SCHEDULER-0 failed" in failed.message
    default = V1ALPHA1.read_status(mx_job(V1ALPHA1, {"phase": "Done", "state": "Failed"}), {})
    assert "the chief replica WORKER-0 failed" in default.message


def test_mlkube_chief_is_the_scheduler_in_dist_mode_and_the_worker_locally():
    dist = MLKUBE.read_status(mx_job(MLKUBE, {"phase": "Done", "state": "Succeeded"}), {})
    assert "SCHEDULER-0 succeeded" in dist.message
    local = mx_job(
        MLKUBE, {"phase": "Done", "state": "Succeeded"}, jobMode="local", replicaSpecs=spec_list(WORKER=1)
    )
    assert "WORKER-0 succeeded" in MLKUBE.read_status(local, {}).message


@BOTH
def test_replica_table(kind):
    body = {
        "phase": "Running",
        "state": "Running",
        "replicaStatuses": replica_statuses(kind, WORKER={"Running": 2}),
    }
    replicas = kind.read_status(mx_job(kind, body), {}).replicas
    assert {t: c.to_dict() for t, c in replicas.items()} == {
        "SCHEDULER": {"desired": 1, "active": 0, "succeeded": 0, "failed": 0},
        "SERVER": {"desired": 2, "active": 0, "succeeded": 0, "failed": 0},
        "WORKER": {"desired": 2, "active": 2, "succeeded": 0, "failed": 0},
    }


@BOTH
def test_no_status_is_stalled_after_the_grace_period(kind):
    status = kind.read_status(mx_job(kind), {}, now=datetime(2026, 3, 2, 10, 5, tzinfo=UTC))
    assert (status.state, status.stalled, status.reason) == (JobState.PENDING, True, OPERATOR_NOT_RUNNING)
    assert "legacy MXNet operator" in status.message


def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_mlkube_pods_belong_to_the_job_through_their_batch_job_name():
    labels = {"mxnet.mlkube.io": "", "job_type": "WORKER", "runtime_id": "ab1c", "task_index": "1"}
    mine = pod("dist-worker-ab1c-1-x7k2p", labels)
    selector = parse_label_selector(MLKUBE.pod_selector("dist"))
    assert labels_match(selector, mine)
    assert MLKUBE.owns_pod("dist", mine)
    # Another MxJob "dist-worker-x" has pods "dist-worker-x-worker-<rid>-<i>-..." the selector matches too.
    other = pod("dist-worker-x-worker-zz9q-0-abcde", {**labels, "runtime_id": "zz9q", "task_index": "0"})
    assert labels_match(selector, other)
    assert not MLKUBE.owns_pod("dist", other)
    assert not MLKUBE.owns_pod("dist", pod("dist-worker-ab1c-1-x7k2p", {"job_type": "WORKER"}))
    master = parse_label_selector(MLKUBE.master_selector("dist"))
    assert labels_match(master, pod("dist-worker-ab1c-0-aaaaa", {**labels, "task_index": "0"}))
    assert not labels_match(master, mine)


def test_v1alpha1_pods_carry_the_job_name():
    labels = {
        "kubeflow.org": "",
        "job_type": "SERVER",
        "runtime_id": "q2w3",
        "mx_job_name": "dist",
        "task_index": "1",
    }
    mine = pod("dist-server-q2w3-1-abcde", labels)
    selector = parse_label_selector(V1ALPHA1.pod_selector("dist"))
    assert labels_match(selector, mine)
    assert not labels_match(selector, pod("x", {**labels, "mx_job_name": "dist2"}))
    assert V1ALPHA1.owns_pod("dist", mine) and not V1ALPHA1.owns_pod("dist2", mine)
    replica = V1ALPHA1.replica_of_pod(mine)
    assert (replica.replica_type, replica.index) == ("SERVER", 1)


def test_registry_tells_the_three_mxjobs_apart():
    assert get_kind("MXJob").api_version == "kubeflow.org/v1"
    assert (V1ALPHA1.api_version, V1ALPHA1.family, V1ALPHA1.resource.key) == (
        "kubeflow.org/v1alpha1",
        "mxnet-legacy",
        "mxjobs.kubeflow.org",
    )
    assert (MLKUBE.kind, MLKUBE.api_version, MLKUBE.default_container) == (
        "MxJob",
        "mxnet.mlkube.io/v1beta1",
        "mxnet",
    )
    with pytest.raises(
        ValueError, match=re.escape("known apiVersions of MXJob: kubeflow.org/v1, kubeflow.org/v1alpha1")
    ):
        get_kind("MXJob", "kubeflow.org/v1beta1")
