"""Kubeflow Trainer v2 TrainJobs read from statuses shaped as the v2.3.0 controller writes them: conditions
copied from the JobSet (``pkg/runtime/framework/plugins/jobset/jobset.go`` ``Status``), Suspended/Resumed and
the deadline from ``pkg/controller/trainjob_controller.go``, ``jobsStatus`` per replicated job, and
``trainerStatus`` (v2.2+). Pods carry the JobSet and batch Job labels."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from localkube.selectors import labels_match, parse_label_selector

from airflow_provider_training.kinds import JobState, JobStatus, get_kind
from airflow_provider_training.kinds.common import OPERATOR_NOT_RUNNING
from airflow_provider_training.kinds.trainer import read_status
from tests.fixtures import FIXTURES

TRAIN_JOB = get_kind("TrainJob", "trainer.kubeflow.org/v1alpha1")
CREATED_AT = "2026-11-30T08:00:00Z"
AT = "2026-11-30T08:05:00Z"
SOON = datetime(2026, 11, 30, 8, 0, 30, tzinfo=UTC)  # within the 60 s grace period
LATE = datetime(2026, 11, 30, 8, 2, 0, tzinfo=UTC)


def cond(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": AT}


def jobs(**counts: dict[str, int]) -> list[dict[str, Any]]:
    """``jobsStatus`` as the JobSet plugin copies it: every counter written, 0 included."""
    base = {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
    return [{"name": name.replace("_", "-"), **base, **values} for name, values in counts.items()]


def train_job(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "mnist", "namespace": "demo", "creationTimestamp": CREATED_AT},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec},
    }
    if status is not None:
        obj["status"] = status
    return obj


def read(job: dict[str, Any], now: datetime = SOON) -> JobStatus:
    from airflow_provider_training.kinds.trainer import read_status

    return read_status(job, {}, now=now)


def test_complete_is_succeeded_with_the_jobsets_reason_and_time():
    status = read(
        train_job(
            {
                "conditions": [cond("Complete", "True", "AllJobsCompleted", "jobset completed successfully")],
                "jobsStatus": jobs(node={"succeeded": 1}),
            }
        )
    )

    assert (status.state, status.reason, status.message) == (
        JobState.SUCCEEDED,
        "AllJobsCompleted",
        "jobset completed successfully",
    )
    assert status.end == datetime(2026, 11, 30, 8, 5, tzinfo=UTC)
    assert status.start == datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    assert status.replicas["node"].to_dict() == {"desired": None, "active": 0, "succeeded": 1, "failed": 0}


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("FailedJobs", "jobset failed due to reaching max restarts"),
        ("DeadlineExceeded", "TrainJob exceeded its activeDeadlineSeconds"),
        ("TrainingRuntimeNotSupported", "unsupported runtime: TrainingRuntime.example.com"),
    ],
)
def test_failed_carries_the_conditions_reason(reason, message):
    status = read(train_job({"conditions": [cond("Failed", "True", reason, message)]}))

    assert (status.state, status.reason, status.message) == (JobState.FAILED, reason, message)
    assert status.state.terminal


def test_failed_wins_over_complete_and_suspended():
    conditions = [
        cond("Suspended", "True", "Suspended"),
        cond("Complete", "True", "AllJobsCompleted"),
        cond("Failed", "True", "FailedJobs"),
    ]

    assert read(train_job({"conditions": conditions})).state == JobState.FAILED


def test_a_false_condition_decides_nothing():
    status = read(
        train_job({"conditions": [cond("Failed", "False", "FailedJobs")], "jobsStatus": jobs(node={})})
    )

    assert status.state == JobState.PENDING


def test_suspended_is_not_terminal():
    status = read(
        train_job(
            {"conditions": [cond("Suspended", "True", "Suspended", "TrainJob is suspended")]}, suspend=True
        )
    )

    assert (status.state, status.reason, status.message) == (
        JobState.SUSPENDED,
        "Suspended",
        "TrainJob is suspended",
    )
    assert not status.state.terminal


def test_resumed_is_running_once_its_jobs_are_active_never_stuck_as_created():
    """kubeflow/sdk#803: the SDK reports a resumed TrainJob as Created forever."""
    resumed = [cond("Suspended", "False", "Resumed", "TrainJob is resumed")]

    before = read(train_job({"conditions": resumed, "jobsStatus": jobs(node={"suspended": 1})}))
    after = read(train_job({"conditions": resumed, "jobsStatus": jobs(node={"active": 1})}))

    assert before.state == JobState.PENDING
    assert (after.state, after.reason) == (JobState.RUNNING, "Running")


def test_running_from_jobs_status_without_any_condition():
    """Trainer v2 writes no Running condition: active or ready Jobs say it runs."""
    ready = read(train_job({"jobsStatus": jobs(node={"ready": 1})}))
    created = read(train_job({"jobsStatus": jobs(node={})}))

    assert ready.state == JobState.RUNNING
    assert created.state == JobState.PENDING and not created.stalled


def test_jobs_status_counts_per_replicated_job_in_status_order():
    status = read(
        train_job(
            {
                "jobsStatus": jobs(
                    dataset_initializer={"succeeded": 1},
                    model_initializer={"failed": 1},
                    node={"active": 1, "ready": 1},
                    launcher={"ready": 1},
                )
            }
        )
    )

    assert {name: counts.to_dict() for name, counts in status.replicas.items()} == {
        "dataset-initializer": {"desired": None, "active": 0, "succeeded": 1, "failed": 0},
        "model-initializer": {"desired": None, "active": 0, "succeeded": 0, "failed": 1},
        "node": {"desired": None, "active": 1, "succeeded": 0, "failed": 0},
        "launcher": {"desired": None, "active": 1, "succeeded": 0, "failed": 0},
    }


def test_no_status_is_pending_then_stalled_naming_the_jobset_creation():
    """kubeflow/trainer#2351: when the JobSet cannot be created the TrainJob gets no condition at all."""
    early = read(train_job())
    late = read(train_job(), now=LATE)

    assert (early.state, early.stalled) == (JobState.PENDING, False)
    assert (late.state, late.stalled, late.reason) == (JobState.PENDING, True, OPERATOR_NOT_RUNNING)
    assert "TrainJob mnist has no status 120s after creation" in late.message
    assert "kubeflow/trainer#2351" in late.message and "JobSet" in late.message


def test_grace_period_is_the_callers():
    assert TRAIN_JOB.status(train_job(), grace_seconds=0.0).stalled


TRAINER_STATUS = {
    "progressPercentage": 40,
    "estimatedRemainingSeconds": 120,
    "metrics": [{"name": "loss", "value": "0.31"}, {"name": "accuracy", "value": "0.88"}],
    "lastUpdatedTime": "2026-11-30T08:04:00Z",
}


def test_trainer_status_is_in_the_message_and_carried_as_progress():
    status = read(train_job({"jobsStatus": jobs(node={"active": 1}), "trainerStatus": TRAINER_STATUS}))

    assert status.state == JobState.RUNNING
    assert status.message == "trainer: progress 40%, about 120s left, loss=0.31, accuracy=0.88"
    assert status.progress == TRAINER_STATUS
    assert status.to_dict()["progress"] == TRAINER_STATUS
    assert JobStatus.from_dict(status.to_dict()).progress == TRAINER_STATUS


def test_trainer_status_beside_a_finished_conditions_message():
    done = {"progressPercentage": 100, "estimatedRemainingSeconds": 0}
    status = read(
        train_job(
            {"conditions": [cond("Complete", "True", "AllJobsCompleted", "done")], "trainerStatus": done}
        )
    )

    assert status.message == "done (trainer: progress 100%, about 0s left)"
    assert status.to_dict()["progress"] == done


def test_without_trainer_status_the_payload_is_unchanged():
    """Other kinds' (and older) payloads keep their keys; an older payload without progress still reads."""
    status = read(train_job({"jobsStatus": jobs(node={"active": 1})}))

    assert status.progress is None and "progress" not in status.to_dict()
    older = {key: value for key, value in status.to_dict().items()}
    assert JobStatus.from_dict(older).progress is None


# -- pods ---------------------------------------------------------------------------------------------------


def pod(replicated_job: str, index: int | None, *, job_index: str = "0", jobset: str = "mnist") -> dict:
    """A pod as the JobSet's batch Job creates it (labels from jobset and the Job controller)."""
    labels = {
        "jobset.sigs.k8s.io/jobset-name": jobset,
        "jobset.sigs.k8s.io/replicatedjob-name": replicated_job,
        "jobset.sigs.k8s.io/job-index": job_index,
        "batch.kubernetes.io/job-name": f"{jobset}-{replicated_job}-{job_index}",
    }
    name = f"{jobset}-{replicated_job}-{job_index}-{index if index is not None else 0}-x7k2p"
    if index is not None:
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
    return {"metadata": {"name": name, "labels": labels}}


def selected(selector: str, obj: dict) -> bool:
    return labels_match(parse_label_selector(selector), obj)


def test_replica_type_and_index_from_the_jobset_labels():
    assert TRAIN_JOB.replica_of_pod(pod("node", 1)).replica_type == "node"
    assert TRAIN_JOB.replica_of_pod(pod("node", 1)).index == 1
    assert TRAIN_JOB.replica_of_pod(pod("dataset-initializer", 0)).replica_type == "dataset-initializer"
    # A second Job of one replicated job: its completion index is not the node rank.
    assert TRAIN_JOB.replica_of_pod(pod("node", 0, job_index="1")).index is None


def test_selectors_find_the_jobsets_pods_and_the_deciding_ones():
    pods = [pod("node", 0), pod("node", 1), pod("launcher", 0), pod("dataset-initializer", 0)]
    other = pod("node", 0, jobset="other")

    assert all(selected(TRAIN_JOB.pod_selector("mnist"), p) for p in pods)
    assert not selected(TRAIN_JOB.pod_selector("mnist"), other)
    masters = [p["metadata"]["name"] for p in pods if selected(TRAIN_JOB.master_selector("mnist"), p)]
    assert masters == ["mnist-node-0-0-x7k2p", "mnist-launcher-0-0-x7k2p"]
    # The hub's one pod watch for TrainJobs holds every pod selector.
    assert all(selected(TRAIN_JOB.pod_watch_selectors[0], p) for p in [*pods, other])


def test_deciding_replica_is_the_launcher_when_there_is_one_else_the_nodes():
    mpi = train_job({"jobsStatus": jobs(node={"ready": 2}, launcher={"active": 1})})
    torch = train_job({"jobsStatus": jobs(dataset_initializer={"succeeded": 1}, node={"active": 1})})

    assert TRAIN_JOB.deciding_replica(mpi) == "launcher"
    assert TRAIN_JOB.deciding_replica(torch) == "node"
    # Before the JobSet reports anything the runtime may still have a launcher: not known yet (the log
    # streamer then follows the master-role pods, the launcher's and node 0's).
    assert TRAIN_JOB.deciding_replica(train_job()) is None


def test_suspend_patch_and_default_container():
    assert TRAIN_JOB.suspend_patch(True) == {"spec": {"suspend": True}}
    assert TRAIN_JOB.suspend_patch(False) == {"spec": {"suspend": False}}
    assert TRAIN_JOB.default_container == "node"
    assert (TRAIN_JOB.resource.plural, TRAIN_JOB.family) == ("trainjobs", "trainer")


# -- what the real Trainer v2.3.0 and JobSet v0.12.0 wrote (tests/fixtures/real-trainer, recorded by
# tests/real/test_real_trainer.py with REALTRAINER_RECORD=1), read status by status as the waiter reads it.

REAL_TRAINER = FIXTURES / "real-trainer"
RUNNING = [("Pending", ""), ("Pending", "Pending"), ("Running", "Running")]


def recorded_states(record: str) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """The (state, reason) of each recorded TrainJob status, consecutive repeats once; and the last job."""
    data = json.loads((REAL_TRAINER / f"{record}.json").read_text())
    states: list[tuple[str, str]] = []
    job: dict[str, Any] = {}
    for status in data["trainjob"]["statuses"]:
        status = json.loads(json.dumps(status).replace('"<time>"', '"2026-12-03T00:00:05Z"'))
        job = train_job(status, **data["trainjob"]["spec"])
        read = read_status(job, now=SOON)  # the first, empty status: within the grace period
        if not states or states[-1] != (read.state.value, read.reason):
            states.append((read.state.value, read.reason))
    return states, job


@pytest.mark.parametrize(
    ("record", "expected", "deciding"),
    [
        ("success", [*RUNNING, ("Succeeded", "AllJobsCompleted")], "node"),
        ("num-nodes", [*RUNNING, ("Succeeded", "AllJobsCompleted")], "node"),
        ("deepspeed-success", [*RUNNING, ("Succeeded", "AllJobsCompleted")], "launcher"),
        # The failing node's Job failed and its pod went before the JobSet counted it: one status with no
        # active Job (Pending), then Failed with the JobSet's reason.
        ("failure", [*RUNNING, ("Pending", "Pending"), ("Failed", "FailedJobs")], "node"),
        (
            "suspend",
            [*RUNNING, ("Suspended", "Suspended"), *RUNNING[1:], ("Succeeded", "AllJobsCompleted")],
            "node",
        ),
    ],
)
def test_the_real_controllers_statuses_read_in_order(record, expected, deciding):
    states, last = recorded_states(record)

    assert states == expected
    assert TRAIN_JOB.deciding_replica(last) == deciding
