"""T9k jobs read from recorded objects shaped like the real controller output in the reference (UC manual,
2023-11 / 2024-09): Failed before Completed, Paused not terminal, pods from ``status.tasks``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from localkube.selectors import labels_match, parse_label_selector

from airflow_provider_training.kinds import JobState, ReplicaFailure, get_kind
from airflow_provider_training.kinds.common import OPERATOR_NOT_RUNNING
from airflow_provider_training.kinds.tensorstack import pod_names, read_status

API = "batch.tensorstack.dev/v1beta1"
CREATED_AT = "2024-09-10T08:00:00Z"


def cond(type_: str, status: str, reason: str, message: str = "", at: str = "2024-09-10T08:05:00Z") -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


def t9k_job(
    kind: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": API,
        "kind": kind,
        "metadata": {"name": name, "namespace": "demo", "creationTimestamp": CREATED_AT},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def replica_specs(**counts: int) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "t9kpublic/pytorch-1.13.0:sdk-0.5.2"}]}}
    return {"replicaSpecs": [{"type": t, "replicas": n, "template": template} for t, n in counts.items()]}


def replica(
    name: str, phase: str, exit_code: int | None = None, container: str = "pytorch"
) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "phase": phase}
    if exit_code is not None:
        entry["containers"] = [{"name": container, "state": "Terminated", "exitCode": exit_code}]
    return entry


# GenericJob-style failure (2024-09): Failed=True AND Completed=True, ReplicaFailure names the pod.
FAILED = t9k_job(
    "PyTorchTrainingJob",
    "job-sample-8961e",
    replica_specs(master=1, worker=2),
    {
        "phase": "Failed",
        "conditions": [
            cond("Initialized", "True", "-", at="2024-09-10T08:00:03Z"),
            cond("Running", "False", "Failed"),
            cond("Failed", "True", "Failed", 'The job is failed with rule: {"worker":["0"]}'),
            cond("Completed", "True", "Failed"),
            cond(
                "ReplicaFailure",
                "True",
                "ErrorInPod",
                "Pod[job-sample-8961e-worker-0] exited with error code 127",
            ),
        ],
        "tasks": [
            {
                "type": "master",
                "restartCount": 0,
                "replicas": [replica("job-sample-8961e-master-0", "Succeeded", 0)],
            },
            {
                "type": "worker",
                "restartCount": 0,
                "replicas": [
                    replica("job-sample-8961e-worker-0", "Failed", 127),
                    replica("job-sample-8961e-worker-1", "Running"),
                ],
            },
        ],
        "aggregate": {"running": 1, "succeeded": 1, "failed": 1},
    },
)

# MPIJob/ColossalAIJob-style success (2024-09).
SUCCEEDED = t9k_job(
    "MPIJob",
    "mpi-example",
    {"worker": {"replicas": 2}},
    {
        "phase": "Succeeded",
        "conditions": [
            cond("Initialized", "True", "-", at="2024-09-10T08:00:02Z"),
            cond("Running", "False", "Succeeded", "The job has finished successfully."),
            cond("Failed", "False", "Succeeded", "The job has finished successfully."),
            cond("Completed", "True", "Succeeded", "The job has finished successfully."),
            cond("ReplicaFailure", "False", "Finished"),
        ],
        "aggregate": {"succeeded": 3},
    },
)

# DeepSpeedJob failure (2023-11): every condition reason "Failed", the message carries the exit code.
DEEPSPEED_FAILED = t9k_job(
    "DeepSpeedJob",
    "baichuan2-sft",
    {"worker": {"replicas": 2}},
    {
        "phase": "Failed",
        "conditions": [
            cond("Running", "False", "Failed"),
            cond(
                "Failed",
                "True",
                "Failed",
                "DeepSpeedJob baichuan2-sft has failed: baichuan2-sft-worker-0 failed with exit code 137",
            ),
            cond("Completed", "True", "Failed"),
            cond("ReplicaFailure", "True", "Failed"),
        ],
        "tasks": [{"type": "worker", "status": [replica("baichuan2-sft-worker-0", "Failed", 137, "worker")]}],
    },
)


def test_failed_job_with_completed_true_is_a_failure():
    status = read_status(FAILED)
    assert status.state == JobState.FAILED
    assert status.reason == "Failed"
    assert 'The job is failed with rule: {"worker":["0"]}' in status.message
    assert "job-sample-8961e-worker-0 (pytorch) exit code 127" in status.message
    assert status.end == datetime(2024, 9, 10, 8, 5, tzinfo=UTC)
    assert status.start == datetime(2024, 9, 10, 8, 0, 3, tzinfo=UTC)


def test_failed_condition_wins_even_before_the_phase_says_so():
    job = {**FAILED, "status": {**FAILED["status"], "phase": "Running"}}
    assert read_status(job).state == JobState.FAILED
    job = {**FAILED, "status": {**FAILED["status"], "phase": "Succeeded"}}
    assert read_status(job).state == JobState.FAILED


def test_deepspeed_failure_keeps_the_controller_message():
    status = read_status(DEEPSPEED_FAILED)
    assert status.state == JobState.FAILED
    assert "baichuan2-sft-worker-0 failed with exit code 137" in status.message
    assert status.replicas["worker"].failed == 1


def test_success():
    status = read_status(SUCCEEDED)
    assert (status.state, status.reason) == (JobState.SUCCEEDED, "Succeeded")
    assert status.message == "The job has finished successfully."
    assert status.state.terminal
    assert status.replicas == {"all": status.replicas["all"]}
    assert status.replicas["all"].to_dict() == {"desired": 3, "active": 0, "succeeded": 3, "failed": 0}


def test_paused_is_suspended_not_terminal():
    job = t9k_job(
        "TensorFlowTrainingJob",
        "keras",
        {**replica_specs(worker=4), "runMode": {"pause": {"enabled": True}}},
        {"phase": "Paused", "conditions": [cond("Paused", "True", "Paused", "all replicas deleted")]},
    )
    status = read_status(job)
    assert status.state == JobState.SUSPENDED
    assert not status.state.terminal
    assert status.reason == "Paused"
    assert "paused" in status.message and "runMode.pause.enabled" in status.message
    assert status.replicas["worker"].desired == 4


@pytest.mark.parametrize(
    ("phase", "state", "reason"),
    [
        ("Pending", JobState.PENDING, "Pending"),
        ("Running", JobState.RUNNING, "Running"),
        ("Resuming", JobState.PENDING, "Resuming"),
        ("Unknown", JobState.PENDING, "Unknown"),
    ],
)
def test_non_terminal_phases_keep_waiting(phase, state, reason):
    status = read_status(t9k_job("XGBoostTrainingJob", "xgb", replica_specs(master=1), {"phase": phase}))
    assert (status.state, status.reason) == (state, reason)
    assert not status.state.terminal


def test_no_status_is_pending_then_stalled():
    job = t9k_job("GenericJob", "generic", replica_specs(worker=1))
    young = read_status(job, now=datetime(2024, 9, 10, 8, 0, 30, tzinfo=UTC))
    assert (young.state, young.stalled) == (JobState.PENDING, False)
    old = read_status(job, now=datetime(2024, 9, 10, 8, 5, tzinfo=UTC))
    assert (old.state, old.stalled, old.reason) == (JobState.PENDING, True, OPERATOR_NOT_RUNNING)
    assert "T9k job controller" in old.message


def test_replica_table_per_type_from_tasks():
    replicas = read_status(FAILED).replicas
    assert {t: c.to_dict() for t, c in replicas.items()} == {
        "master": {"desired": 1, "active": 0, "succeeded": 1, "failed": 0},
        "worker": {"desired": 2, "active": 1, "succeeded": 0, "failed": 1},
    }


def test_pod_names_from_tasks_with_the_documented_fallbacks():
    assert pod_names(FAILED) == [
        "job-sample-8961e-master-0",
        "job-sample-8961e-worker-0",
        "job-sample-8961e-worker-1",
    ]
    assert pod_names(DEEPSPEED_FAILED) == ["baichuan2-sft-worker-0"]
    old = t9k_job(
        "TensorFlowTrainingJob", "x", {}, {"tasks": [{"type": "ps", "replicaStatus": [{"name": "x-ps-0"}]}]}
    )
    assert pod_names(old) == ["x-ps-0"]


def test_failed_replicas_from_the_status():
    kind = get_kind("PyTorchTrainingJob")
    [failure] = kind.failed_replicas(FAILED)
    assert failure == ReplicaFailure(
        "worker",
        pod="job-sample-8961e-worker-0",
        index=0,
        container="pytorch",
        exit_code=127,
        reason="Terminated",
    )
    assert failure.to_dict() == {  # as it goes into the wait event's payload
        "pod": "job-sample-8961e-worker-0",
        "replica_type": "worker",
        "index": 0,
        "container": "pytorch",
        "exit_code": 127,
        "reason": "Terminated",
        "message": "",
        "restarts": 0,
    }
    assert kind.failed_replicas(SUCCEEDED) == []


def test_debug_mode_refuses_waiting_for_success():
    kind = get_kind("PyTorchTrainingJob")
    job = t9k_job(
        "PyTorchTrainingJob",
        "torch-debug",
        {**replica_specs(worker=1), "runMode": {"debug": {"enabled": True}}},
    )
    problem = kind.check_target(job, JobState.SUCCEEDED)
    assert problem is not None
    assert "torch-debug" in problem and "debug mode" in problem and "never succeeds" in problem
    assert kind.check_target(job, JobState.RUNNING) is None
    legacy = {**job, "spec": {**job["spec"], "runMode": {"debug": {"enable": True}}}}
    assert kind.check_target(legacy, JobState.SUCCEEDED) is not None
    off = {**job, "spec": {**job["spec"], "runMode": {"debug": {"enabled": False}}}}
    assert kind.check_target(off, JobState.SUCCEEDED) is None


def pod(name: str, owner: str | None) -> dict[str, Any]:
    labels = {"tensorstack.dev/owner-name": owner} if owner else {}
    return {"metadata": {"name": name, "labels": labels}}


@pytest.mark.parametrize(
    ("name", "owner", "expected"),
    [
        ("torch-mnist-trainingjob-worker-0", "torch-mnist-trainingjob", ("worker", 0)),
        ("mnist-84350-node-12", "mnist-84350", ("node", 12)),
        ("mpi-example-launcher", "mpi-example", ("launcher", None)),
        ("job-2-ps-1", "job-2", ("ps", 1)),
        ("lost-label-chief-0", None, ("chief", 0)),
    ],
)
def test_replica_of_pod_from_the_name(name, owner, expected):
    replica = get_kind("TensorFlowTrainingJob").replica_of_pod(pod(name, owner))
    assert (replica.replica_type, replica.index, replica.name) == (*expected, name)


def test_pod_selector_finds_the_owner_label_only():
    kind = get_kind("DeepSpeedJob")
    selector = parse_label_selector(kind.pod_selector("gpt-125m"))
    assert labels_match(selector, pod("gpt-125m-worker-0", "gpt-125m"))
    assert not labels_match(selector, pod("gpt-125m-x-worker-0", "gpt-125m-x"))
    assert kind.master_selector("gpt-125m") == kind.pod_selector("gpt-125m")


def test_registry_keeps_kubeflow_mpijob_first():
    assert get_kind("MPIJob").api_version == "kubeflow.org/v1"
    t9k = get_kind("MPIJob", API)
    assert (t9k.family, t9k.resource.plural, t9k.resource.key) == (
        "tensorstack",
        "mpijobs",
        "mpijobs.batch.tensorstack.dev",
    )
    kinds = {
        k: get_kind(k).resource.plural
        for k in ("TensorFlowTrainingJob", "PyTorchTrainingJob", "XGBoostTrainingJob")
    }
    assert kinds == {
        "TensorFlowTrainingJob": "tensorflowtrainingjobs",
        "PyTorchTrainingJob": "pytorchtrainingjobs",
        "XGBoostTrainingJob": "xgboosttrainingjobs",
    }
    assert {get_kind(k).family for k in ("DeepSpeedJob", "ColossalAIJob", "GenericJob")} == {"tensorstack"}
