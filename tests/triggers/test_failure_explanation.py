"""A failure always says why, even when the pods are gone, and only with what belongs to this job.

localkube's Kubeflow controller records what the real operator records on the job (ExitedWithCode, the
abnormal-pod warnings with exit codes) and deletes pods per cleanPodPolicy; the trigger starts only after
the job failed and its pods are gone, as when a backoff limit is hit before the trigger attaches.
"""

from __future__ import annotations

import asyncio

import pytest
from localkube.resources import PODS

from airflow_provider_training import diagnostics as diag
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.kinds.base import JobStatus
from airflow_provider_training.outcome import WaitEvent
from airflow_provider_training.results import failure_message
from airflow_provider_training.triggers.training import TrainingJobTrigger
from tests.operators.harness import KIND_BY_NAME, NAMESPACE, job_or_none, manifest, resource
from tests.triggers.test_trigger import first

pytestmark = pytest.mark.timeout(60)
TFJOB, PYTORCH = KIND_BY_NAME["TFJob"], KIND_BY_NAME["PyTorchJob"]


def trigger(case, name, **kwargs):
    return TrainingJobTrigger(
        kind=case.kind,
        api_version="kubeflow.org/v1",
        job_name=name,
        namespace=NAMESPACE,
        get_logs=False,
        check_interval=0.1,
        **kwargs,
    )


async def failed_and_cleaned_up(cluster, case, name):
    """Wait until localkube's controller failed the job and deleted its pods (a sync point)."""
    rt = resource(cluster, case)
    for _ in range(3000):
        job = cluster.store.get(rt, NAMESPACE, name)
        failed = any(
            c["type"] == "Failed" and c["status"] == "True"
            for c in (job.get("status") or {}).get("conditions") or []
        )
        pods = cluster.store.list(PODS, NAMESPACE, label_selector=f"training.kubeflow.org/job-name={name}")
        if failed and not pods:
            return job
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name} did not fail and lose its pods")


async def test_backoff_limit_hit_and_pods_deleted_before_the_trigger_attached(cluster):
    script = {"Worker": {"duration": 0.05, "exit_code": 1, "backoff": 0.02}, "default": {"duration": None}}
    body = manifest(
        TFJOB,
        script,
        name="backoff-gone",
        restart_policy="OnFailure",
        run_policy={"backoffLimit": 2, "cleanPodPolicy": "All"},
    )
    cluster.store.create(resource(cluster, TFJOB), NAMESPACE, body)
    await failed_and_cleaned_up(cluster, TFJOB, "backoff-gone")

    event = await first(trigger(TFJOB, "backoff-gone"))
    await trigger(TFJOB, "backoff-gone").on_kill()

    assert event["status"] == "failed"
    assert "backoff limit" in event["message"]
    # The operator recorded the worker's back-off, not its exit code (the container was already waiting
    # again when it looked): the replica is named, and what is unknown is said plainly.
    [worker] = event["replica_failures"]
    assert worker["message"].startswith("back-off ")
    # Read from the job's events, with the waiter's findings added: every key of the payload's shape.
    assert {key: value for key, value in worker.items() if key != "message"} == {
        "pod": "backoff-gone-worker-0",
        "replica_type": "Worker",
        "index": 0,
        "container": "tensorflow",
        "exit_code": None,
        "reason": "CrashLoopBackOff",
        "restarts": 0,
        "source": "events",
        "log": "the pod was deleted before its log could be read",
        "exit_code_unknown": "the pod was deleted before it could be read",
    }
    text = failure_message(WaitEvent.from_payload(event))
    assert (
        "worker-0 (pod backoff-gone-worker-0, container tensorflow): "
        "exit code unknown: the pod was deleted before it could be read, reason CrashLoopBackOff"
    ) in text
    assert "(from the job's events)" in text
    assert "no log lines: the pod was deleted before its log could be read" in text
    status = JobStatus.from_dict(event["job_status"])
    assert all(counts.active == 0 for counts in status.replicas.values())  # a Failed job has none active
    assert status.replicas["Worker"].failed == 1
    assert "ACTIVE" in diag.replica_table(status)


async def test_a_resubmitted_job_shows_only_its_own_events(cluster):
    """A retry deletes the failed job and submits it again under the same name: the events of the first,
    still in the namespace, are not the second's."""
    rt = resource(cluster, PYTORCH)
    options = {"name": "resubmitted", "restart_policy": "ExitCode", "run_policy": {"cleanPodPolicy": "All"}}
    earlier = cluster.store.create(rt, NAMESPACE, manifest(PYTORCH, {"Master": {"exit_code": 2}}, **options))
    await failed_and_cleaned_up(cluster, PYTORCH, "resubmitted")
    await trigger(PYTORCH, "resubmitted").on_kill()
    while job_or_none(cluster, PYTORCH, "resubmitted") is not None:
        await asyncio.sleep(0.01)
    later = cluster.store.create(rt, NAMESPACE, manifest(PYTORCH, {"Master": {"exit_code": 3}}, **options))
    await failed_and_cleaned_up(cluster, PYTORCH, "resubmitted")

    event = await first(trigger(PYTORCH, "resubmitted", uid=later["metadata"]["uid"]))
    await trigger(PYTORCH, "resubmitted").on_kill()

    hook = AsyncTrainingJobHook()
    try:
        by_name = await hook.list_events(NAMESPACE, "resubmitted", "PyTorchJob")
    finally:
        await hook.close()
    assert {e["involvedObject"]["uid"] for e in by_name} == {
        earlier["metadata"]["uid"],
        later["metadata"]["uid"],
    }  # both jobs' events are still there
    assert event["status"] == "failed"
    assert [(f["pod"], f["exit_code"]) for f in event["replica_failures"]] == [("resubmitted-master-0", 3)]
    failing = [e for e in event["events"] if e["reason"] == "PyTorchJobFailed"]
    assert len(failing) == 1  # the later job's; the earlier one's is not listed
    assert all(e["time"] >= later["metadata"]["creationTimestamp"] for e in event["events"])
    assert "exit code 2" not in failure_message(WaitEvent.from_payload(event))
