"""localkube's JobSet controller (`jobset.x-k8s.io/v1alpha2`), through the real `kubernetes` client: the CRD
of kubernetes-sigs/jobset v0.12.0 (what kubeflow/trainer v2.3.0 pins) loaded from tests/fixtures/crds, the
Jobs run by the batch Job controller, their pods by the scripted runtime."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from localkube.controllers.builtin import BatchJobController
from localkube.controllers.jobset import EXCLUSIVE, JobSetController, set_condition
from test_controller_builtin import running, watch_custom
from test_controller_support import SCRIPT, KubeClient

CRDS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "crds" / "jobset.x-k8s.io-v1alpha2"
API_VERSION = "jobset.x-k8s.io/v1alpha2"
JS = "jobset.sigs.k8s.io/"
INDEX = "batch.kubernetes.io/job-completion-index"
FOREVER = {"duration": None}


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeClient]:
    with running(tmp_path, JobSetController(), BatchJobController(), crd_dir=CRDS) as kube:
        yield kube


def rjob(name: str, replicas: int = 1, pods: int = 1, **job_spec: Any) -> dict:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "backoffLimit": 0,
                "template": {"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}},
                **job_spec,
            }
        },
    }


def jobset(name: str, script: dict, *rjobs: dict, **spec: Any) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": name, "annotations": {SCRIPT: json.dumps(script)}},
        "spec": {"replicatedJobs": list(rjobs), **spec},
    }


def create(kube: KubeClient, manifest: dict) -> dict:
    return kube.custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", manifest
    )


def patch(kube: KubeClient, name: str, body: dict) -> None:
    kube.custom.patch_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", name, body
    )


def until(kube: KubeClient, name: str, check: Any) -> dict:
    return watch_custom(kube, API_VERSION, "jobsets", name, check)[-1]


def condition(js: dict, type_: str) -> tuple[str, str, str] | None:
    found = [c for c in (js.get("status") or {}).get("conditions") or [] if c["type"] == type_]
    return (found[0]["status"], found[0]["reason"], found[0]["message"]) if found else None


def finished(js: dict) -> bool:
    return any(condition(js, t) and condition(js, t)[0] == "True" for t in ("Completed", "Failed"))  # type: ignore[index]


def jobs(kube: KubeClient, name: str) -> list[client.V1Job]:
    found = client.BatchV1Api(kube.api).list_namespaced_job(
        "default", label_selector=f"{JS}jobset-name={name}"
    )
    return sorted(found.items, key=lambda j: j.metadata.name)


def pods(kube: KubeClient, name: str) -> list[client.V1Pod]:
    return kube.core.list_namespaced_pod("default", label_selector=f"{JS}jobset-name={name}").items


def test_success_runs_a_job_per_replica_labelled_as_jobset_does(kube: KubeClient) -> None:
    created = create(
        kube, jobset("train", {"default": {"duration": 0.05}}, rjob("driver"), rjob("workers", 2, 2))
    )
    done = until(kube, "train", finished)

    assert condition(done, "Completed") == ("True", "AllJobsCompleted", "jobset completed successfully")
    assert done["status"]["terminalState"] == "Completed"
    assert done["status"]["replicatedJobsStatus"] == [
        {"name": "driver", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0},
        {"name": "workers", "ready": 0, "succeeded": 2, "failed": 0, "active": 0, "suspended": 0},
    ]
    assert [j.metadata.name for j in jobs(kube, "train")] == [
        "train-driver-0",
        "train-workers-0",
        "train-workers-1",
    ]
    uid = created["metadata"]["uid"]
    worker = jobs(kube, "train")[2]
    expected = {
        f"{JS}jobset-name": "train",
        f"{JS}jobset-uid": uid,
        f"{JS}replicatedjob-name": "workers",
        f"{JS}replicatedjob-replicas": "2",
        f"{JS}global-replicas": "3",
        f"{JS}job-index": "1",
        f"{JS}job-global-index": "2",
        f"{JS}restart-attempt": "0",
    }
    for marks in (worker.metadata.labels, worker.metadata.annotations, worker.spec.template.metadata.labels):
        assert {k: marks[k] for k in expected} == expected
    assert worker.spec.completion_mode == "Indexed" and worker.spec.suspend is False
    owner = worker.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("JobSet", "train", uid, True)

    service = kube.core.read_namespaced_service("train", "default")
    assert (service.spec.cluster_ip, service.spec.selector) == ("None", {f"{JS}jobset-name": "train"})
    names = sorted((p.spec.hostname, p.spec.subdomain) for p in pods(kube, "train"))
    assert names == [
        ("train-driver-0-0", "train"),
        ("train-workers-0-0", "train"),
        ("train-workers-0-1", "train"),
        ("train-workers-1-0", "train"),
        ("train-workers-1-1", "train"),
    ]


def test_a_failed_job_without_failure_policy_fails_the_jobset(kube: KubeClient) -> None:
    script = {"default": FOREVER, "workers-1": {"duration": 0.05, "exit_code": 3}}
    create(kube, jobset("crash", script, rjob("driver"), rjob("workers", 1, 2)))
    failed = until(kube, "crash", finished)

    assert condition(failed, "Failed") == (
        "True",
        "FailedJobs",
        "jobset failed due to one or more job failures (first failed job: crash-workers-0)",
    )
    assert failed["status"]["terminalState"] == "Failed"
    names = lambda: [j.metadata.name for j in jobs(kube, "crash")]  # noqa: E731
    kube.wait_until(lambda: names() == ["crash-workers-0"], "the still active driver Job deleted")


def test_a_failure_policy_restarts_every_job_until_max_restarts(kube: KubeClient) -> None:
    script = {"default": FOREVER, "workers": {"duration": 0.05, "exit_code": 3}}
    create(kube, jobset("again", script, rjob("driver"), rjob("workers"), failurePolicy={"maxRestarts": 1}))
    failed = until(kube, "again", finished)

    assert failed["status"]["restarts"] == 1
    assert condition(failed, "Failed") == (
        "True",
        "ReachedMaxRestarts",
        "jobset failed due to reaching max number of restarts (first failed job: again-workers-0)",
    )
    assert condition(failed, "RestartingJobSet") == ("False", "JobSetFailed", "jobset failed")
    restart = [
        e
        for e in kube.core.list_namespaced_event("default").items
        if e.reason == "RestartJobSetFailurePolicyAction"
    ]
    assert [e.message for e in restart] == [
        "applying RestartJobSet failure policy action (first failed job: again-workers-0)"
    ]
    # the workers' Job of attempt 0 was deleted and made anew; the driver's (still active) went at the end
    recreated = [(j.metadata.name, j.metadata.labels[f"{JS}restart-attempt"]) for j in jobs(kube, "again")]
    assert recreated == [("again-workers-0", "1")]


def test_a_failure_policy_rule_matching_the_failed_job_decides_its_action(kube: KubeClient) -> None:
    script = {"default": FOREVER, "workers": {"duration": 0.05, "exit_code": 3}}
    rules = [
        {"name": "drivers", "action": "RestartJobSet", "targetReplicatedJobs": ["driver"]},
        {"name": "fail", "action": "FailJobSet", "onJobFailureReasons": ["BackoffLimitExceeded"]},
    ]
    policy = {"maxRestarts": 3, "rules": rules}
    create(kube, jobset("rule", script, rjob("driver"), rjob("workers"), failurePolicy=policy))
    failed = until(kube, "rule", finished)

    assert condition(failed, "Failed") == (
        "True",
        "FailJobSetFailurePolicyAction",
        "applying FailJobSet failure policy action (first failed job: rule-workers-0)",
    )
    assert failed["status"]["restarts"] == 0  # the first rule targets the driver only: no restart


def test_success_policy_any_over_a_target_completes_while_others_run(kube: KubeClient) -> None:
    script = {"default": FOREVER, "driver": {"duration": 0.05}}
    policy = {"operator": "Any", "targetReplicatedJobs": ["driver"]}
    create(kube, jobset("any", script, rjob("driver"), rjob("workers", 2), successPolicy=policy))
    done = until(kube, "any", finished)

    assert condition(done, "Completed")[0] == "True"  # type: ignore[index]
    kube.wait_until(
        lambda: [j.metadata.name for j in jobs(kube, "any")] == ["any-driver-0"], "workers deleted"
    )


def test_suspend_propagates_to_the_jobs_and_resume_runs_them(kube: KubeClient) -> None:
    create(kube, jobset("pause", {"default": FOREVER}, rjob("workers", 2), suspend=True))
    suspended = until(kube, "pause", lambda j: condition(j, "Suspended") is not None)

    assert condition(suspended, "Suspended") == ("True", "SuspendedJobs", "jobset is suspended")
    kube.wait_until(
        lambda: len(jobs(kube, "pause")) == 2 and all(j.spec.suspend for j in jobs(kube, "pause")), "jobs"
    )
    assert pods(kube, "pause") == []
    suspended = until(
        kube, "pause", lambda j: [s["suspended"] for s in j["status"]["replicatedJobsStatus"]] == [2]
    )

    patch(kube, "pause", {"spec": {"suspend": False}})
    resumed = until(kube, "pause", lambda j: j["status"]["replicatedJobsStatus"][0]["ready"] == 2)
    assert condition(resumed, "Suspended") == ("False", "ResumeJobs", "jobset is resumed")
    assert len(pods(kube, "pause")) == 2

    patch(kube, "pause", {"spec": {"suspend": True}})
    until(kube, "pause", lambda j: condition(j, "Suspended")[0] == "True")  # type: ignore[index]
    kube.wait_until(lambda: not pods(kube, "pause"), "the pods deleted")


def test_in_order_startup_creates_a_replicated_jobs_jobs_once_the_previous_ones_are_ready(
    kube: KubeClient,
) -> None:
    stream = watch.Watch().stream(
        client.BatchV1Api(kube.api).list_namespaced_job, "default", timeout_seconds=10
    )
    create(
        kube,
        jobset(
            "order",
            {"default": FOREVER},
            rjob("first", 1, 2),
            rjob("second"),
            startupPolicy={"startupPolicyOrder": "InOrder"},
        ),
    )
    seen: list[tuple[str, str, int]] = []
    for event in stream:
        job = event["object"]
        seen.append((event["type"], job.metadata.name, job.status.ready or 0))
        if job.metadata.name == "order-second-0":
            break
    first_ready = seen.index(next(s for s in seen if s[1] == "order-first-0" and s[2] == 2))
    assert first_ready < seen.index(("ADDED", "order-second-0", 0))
    done = until(kube, "order", lambda j: condition(j, "StartupPolicyCompleted") is not None)
    assert condition(done, "StartupPolicyCompleted") == (
        "True",
        "InOrderStartupPolicyCompleted",
        "in order startup policy has completed",
    )
    assert condition(done, "StartupPolicyInProgress")[0] == "False"  # type: ignore[index]


def test_conditions_are_set_as_upstreams_update_condition_and_set_status_condition_do() -> None:
    conditions: list[dict] = []
    assert not set_condition(conditions, "Suspended", "False", "ResumeJobs", "jobset is resumed")  # not added
    assert set_condition(
        conditions, "Completed", "True", "AllJobsCompleted", "done", time="2026-01-01T00:00:00Z"
    )
    assert (
        conditions[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    )  # the given time (a copied condition's)
    assert set_condition(conditions, "Completed", "True", "Other", "again", time="2026-02-02T00:00:00Z")
    assert conditions[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # same status: the time stays
    assert set_condition(conditions, "Failed", "True", "FailedJobs", "x", exclusive=EXCLUSIVE)
    assert [(c["type"], c["status"]) for c in conditions] == [("Completed", "False"), ("Failed", "True")]
    assert set_condition(conditions, "Suspended", "False", "Resumed", "r", add_false=True)
    assert not set_condition(conditions, "Suspended", "False", "Resumed", "r", add_false=True)  # unchanged
