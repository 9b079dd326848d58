"""Run policies and restart policies of the emulated Training Operator (kubeflow-v1.md §1 RunPolicy, §2),
driven by scripted timelines and observed through the real client."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from localkube.gates import open_gate
from test_controller_support import (
    XGBOOST,
    KubeClient,
    conditions,
    example,
    is_true,
    job,
    kc,
    replica,
)

__all__ = ["kc"]

FOREVER = {"duration": None}


def pytorch(
    name: str, script: dict, *, worker_policy: str = "OnFailure", workers: int = 1, **spec: object
) -> dict:
    specs = {"Master": replica("pytorch"), "Worker": replica("pytorch", workers, worker_policy)}
    return job("PyTorchJob", name, specs, script=script, **spec)


def test_exit_code_retryable_restarts_then_succeeds(kc: KubeClient) -> None:
    script = {"Master": {"duration": 1.0}, "Worker-1": {"attempts": [{"exit_code": 137}, {"exit_code": 0}]}}
    kc.create(example(XGBOOST, script=script))
    seen = kc.watch_job("XGBoostJob", "xgboost-dist-iris-test-train", lambda j: is_true(j, "Succeeded"))
    restarting = [s for s in seen if is_true(s, "Restarting")]
    assert restarting, "the job never showed Restarting"
    assert conditions(restarting[0])[-1] == ("Restarting", "True", "XGBoostJobRestarting")
    assert not is_true(restarting[0], "Running")  # Running and Restarting exclude each other
    assert [c[0] for c in conditions(seen[-1])] == ["Created", "Running", "Succeeded"]
    assert "SuccessfulDeletePod" in kc.reasons("xgboost-dist-iris-test-train")
    worker = kc.wait_pod("xgboost-dist-iris-test-train-worker-1", lambda p: p.status.phase == "Succeeded")
    assert worker.status.container_statuses[0].restart_count == 0  # a new pod, not an in-place restart


def test_exit_code_permanent_fails_at_once(kc: KubeClient) -> None:
    script = {"Master": FOREVER, "Worker-0": {"exit_code": 3}}
    kc.create(example(XGBOOST, script=script))
    final = kc.wait_condition("XGBoostJob", "xgboost-dist-iris-test-train", "Failed")
    failed = final["status"]["conditions"][-1]
    assert (failed["type"], failed["reason"]) == ("Failed", "XGBoostJobFailed")
    assert (
        failed["message"]
        == 'job "xgboost-dist-iris-test-train" is failing because "Worker" replica(s) failed.'
    )
    assert final["status"]["completionTime"]
    pod = kc.core.read_namespaced_pod("xgboost-dist-iris-test-train-worker-0", "default")
    assert pod.status.phase == "Failed"  # kept: cleanPodPolicy defaults to None


def test_restart_policy_never_fails_the_job(kc: KubeClient) -> None:
    kc.create(pytorch("never", {"Master": FOREVER, "Worker": {"exit_code": 1}}, worker_policy="Never"))
    final = kc.wait_condition("PyTorchJob", "never", "Failed")
    assert conditions(final) == [
        ("Created", "True", "PyTorchJobCreated"),
        ("Running", "False", "PyTorchJobRunning"),
        ("Failed", "True", "PyTorchJobFailed"),
    ]
    assert final["status"]["replicaStatuses"]["Worker"]["failed"] == 1
    # Once Failed, nothing changes the conditions any more.
    kc.patch("PyTorchJob", "never", {"metadata": {"labels": {"touched": "yes"}}})
    assert conditions(kc.get("PyTorchJob", "never")) == conditions(final)


def test_on_failure_restarts_in_place(kc: KubeClient) -> None:
    script = {"Worker": {"logs": ["attempt {attempt}"], "attempts": [{"exit_code": 1}, {"exit_code": 0}]}}
    kc.create(pytorch("inplace", {**script, "Master": {"duration": 1.0}}))
    kc.wait_condition("PyTorchJob", "inplace", "Succeeded")
    pod = kc.wait_pod("inplace-worker-0", lambda p: p.status.phase == "Succeeded")
    status = pod.status.container_statuses[0]
    assert status.restart_count == 1
    assert status.last_state.terminated.exit_code == 1
    assert status.state.terminated.reason == "Completed"
    assert kc.log("inplace-worker-0") == "attempt 1\n"
    assert kc.log("inplace-worker-0", previous=True) == "attempt 0\n"
    assert "BackOff" in kc.reasons("inplace-worker-0")


def test_backoff_limit(kc: KubeClient) -> None:
    kc.create(
        pytorch("backoff", {"Master": FOREVER, "Worker": {"exit_code": 1}}, runPolicy={"backoffLimit": 2})
    )
    final = kc.wait_condition("PyTorchJob", "backoff", "Failed")
    failed = final["status"]["conditions"][-1]
    assert failed["reason"] == "PyTorchJobFailed"
    assert failed["message"] == "Job backoff has failed because it has reached the specified backoff limit"
    kc.wait_until(lambda: kc.pods("backoff") == [])  # every pod deleted, as TO-1.9 does past the limit


def test_active_deadline_is_checked_on_the_next_pass(kc: KubeClient) -> None:
    # As TO-1.9 (kubeflow/trainer#3358): no requeue at the deadline; the master's end after it is the pass.
    policy = {"activeDeadlineSeconds": 1, "cleanPodPolicy": "Running"}
    gate = f"deadline-{uuid.uuid4().hex[:8]}"
    script = {"default": FOREVER, "Master": {"gate": gate, "duration": 0.1}}
    kc.create(pytorch("deadline", script, runPolicy=policy))
    kc.wait_until(lambda: "startTime" in (kc.get("PyTorchJob", "deadline").get("status") or {}), "a start")
    started = datetime.fromisoformat(kc.get("PyTorchJob", "deadline")["status"]["startTime"])
    kc.wait_until(lambda: datetime.now(UTC) > started + timedelta(seconds=1), "the deadline to pass")
    open_gate(gate)  # a pod event after the deadline (on a slow machine the pods' start may be one already)
    final = kc.wait_condition("PyTorchJob", "deadline", "Failed")
    failed = final["status"]["conditions"][-1]
    assert failed["message"] == "Job deadline has failed because it was active longer than specified deadline"
    assert failed["reason"] == "PyTorchJobFailed"
    assert final["status"]["completionTime"] >= final["status"]["startTime"]
    kc.wait_until(lambda: kc.pods("deadline") == [])


@pytest.mark.parametrize(
    ("policy", "remaining"),
    [
        ("None", ["pods-master-0", "pods-worker-0"]),
        ("Running", ["pods-master-0"]),
        ("All", []),
    ],
)
def test_clean_pod_policy(kc: KubeClient, policy: str, remaining: list[str]) -> None:
    kc.create(pytorch("pods", {"Worker": FOREVER}, runPolicy={"cleanPodPolicy": policy}))
    kc.wait_condition("PyTorchJob", "pods", "Succeeded")
    kc.wait_until(lambda: [p.metadata.name for p in kc.pods("pods")] == remaining)
    services = [s.metadata.name for s in kc.core.list_namespaced_service("default").items]
    assert services == (["pods-master-0", "pods-worker-0"] if policy == "None" else remaining)
    if policy == "None":
        assert kc.core.read_namespaced_pod("pods-worker-0", "default").status.phase == "Running"
        assert "done" in kc.log("pods-master-0")


def test_ttl_after_finished_deletes_the_job_and_its_pods(kc: KubeClient) -> None:
    kc.create(pytorch("ttl", {}, runPolicy={"ttlSecondsAfterFinished": 0}))
    kc.wait_until(lambda: kc.gone("PyTorchJob", "ttl"))
    kc.wait_until(lambda: kc.pods("ttl") == [])
    assert "SuccessfulDeleteJob" in kc.reasons("ttl")


def test_suspend_and_resume(kc: KubeClient) -> None:
    kc.create(pytorch("pause", {"Master": {"duration": 1.5}}, runPolicy={"suspend": True}))
    suspended = kc.wait_condition("PyTorchJob", "pause", "Suspended")
    assert conditions(suspended) == [
        ("Created", "True", "PyTorchJobCreated"),
        ("Suspended", "True", "PyTorchJobSuspended"),
    ]
    assert kc.pods("pause") == []
    kc.patch("PyTorchJob", "pause", {"spec": {"runPolicy": {"suspend": False}}})
    running = kc.wait_condition("PyTorchJob", "pause", "Running")
    assert ("Suspended", "False", "PyTorchJobResumed") in conditions(running)
    first_start = running["status"]["startTime"]
    kc.patch("PyTorchJob", "pause", {"spec": {"runPolicy": {"suspend": True}}})
    again = kc.wait_condition("PyTorchJob", "pause", "Suspended")
    assert conditions(again)[-2:] == [
        ("Running", "False", "PyTorchJobSuspended"),
        ("Suspended", "True", "PyTorchJobSuspended"),
    ]
    kc.wait_until(lambda: kc.pods("pause") == [])
    kc.patch("PyTorchJob", "pause", {"spec": {"runPolicy": {"suspend": False}}})
    final = kc.wait_condition("PyTorchJob", "pause", "Succeeded")
    assert final["status"]["startTime"] >= first_start  # reset on resume
    assert "PyTorchJobResumed" in kc.reasons("pause")


def test_invalid_mpijob_gets_only_a_warning_event(kc: KubeClient) -> None:
    kc.create(job("MPIJob", "nolauncher", {"Worker": replica("mpi", 2)}))
    kc.wait_until(lambda: "MPIJobFailedValidation" in kc.reasons("nolauncher"))
    (event,) = [e for e in kc.events("nolauncher") if e.reason == "MPIJobFailedValidation"]
    assert event.type == "Warning"
    assert event.message == (
        "MPIJob failed validation because MPIReplicaSpec is not valid: Master ReplicaSpec must be present"
    )
    assert "status" not in kc.get("MPIJob", "nolauncher")
    assert kc.pods("nolauncher") == []


def test_mpijob_failed_launcher_reason_quirk(kc: KubeClient) -> None:
    specs = {"Launcher": replica("mpi", command=["mpirun"]), "Worker": replica("mpi", 1)}
    kc.create(job("MPIJob", "mpifail", specs, script={"Launcher": {"exit_code": 1}, "Worker": FOREVER}))
    final = kc.wait_condition("MPIJob", "mpifail", "Failed")
    assert conditions(final)[-1] == ("Failed", "True", "MPIJobMPIJobFailed")


def test_template_restart_policy_is_overwritten_with_a_warning(kc: KubeClient) -> None:
    specs = {"Worker": replica("jax", 1, "OnFailure")}
    specs["Worker"]["template"]["spec"]["restartPolicy"] = "Always"
    kc.create(job("JAXJob", "tmpl", specs))
    kc.wait_condition("JAXJob", "tmpl", "Succeeded")
    assert kc.core.read_namespaced_pod("tmpl-worker-0", "default").spec.restart_policy == "OnFailure"
    assert "SettedPodTemplateRestartPolicy" in kc.reasons("tmpl")
