"""The batch/v1 Job and apps/v1 ReplicaSet controllers, driven through the real `kubernetes` client.

Also holds the helpers the legacy-API controller tests share (a cluster with chosen controllers, watching a
custom object until a predicate holds).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from localkube.cluster import LocalKube
from localkube.controllers.builtin import (
    BatchJobController,
    ReplicaSetController,
    format_indexes,
    parse_indexes,
)
from test_controller_support import SCRIPT, KubeClient


@contextmanager
def running(tmp_path: Path, *controllers: Any, crd_dir: Path | None = None) -> Iterator[KubeClient]:
    """A scripted-runtime localkube with exactly `controllers` (and the CRDs of `crd_dir`), and the real
    client against it."""
    cluster = LocalKube(controllers=list(controllers), crd_dir=crd_dir)
    with cluster:
        cluster.write_kubeconfig(tmp_path / "kubeconfig")
        kube = KubeClient(cluster)
        try:
            yield kube
        finally:
            kube.api.close()
        assert cluster.task_errors == []


def watch_custom(
    kube: KubeClient,
    api_version: str,
    plural: str,
    name: str,
    until: Callable[[dict], bool],
    namespace: str = "default",
    timeout: int = 10,
    resource_version: str | None = None,
) -> list[dict]:
    """Every state of one custom object seen through a watch (from its current state, or every change after
    `resource_version`), until `until` holds (or fails the test)."""
    group, version = api_version.split("/")
    seen: list[dict] = []
    stream = watch.Watch().stream(
        kube.custom.list_namespaced_custom_object,
        group,
        version,
        namespace,
        plural,
        field_selector=f"metadata.name={name}",
        timeout_seconds=timeout,
        **({"resource_version": resource_version} if resource_version else {}),
    )
    for event in stream:
        seen.append(event["object"])
        if until(event["object"]):
            return seen
    pytest.fail(f"{plural} {name} never reached the expected state; last status: {seen[-1].get('status')}")


def scripted(template: dict, script: dict) -> dict:
    template.setdefault("metadata", {}).setdefault("annotations", {})[SCRIPT] = json.dumps(script)
    return template


def pod_template(script: dict, restart_policy: str = "Never", **labels: str) -> dict:
    return scripted(
        {
            "metadata": {"labels": {"app": "demo", **labels}},
            "spec": {
                "restartPolicy": restart_policy,
                "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}],
            },
        },
        script,
    )


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeClient]:
    with running(tmp_path, BatchJobController(), ReplicaSetController()) as kube:
        yield kube


def batch(kube: KubeClient) -> client.BatchV1Api:
    return client.BatchV1Api(kube.api)


def create_job(kube: KubeClient, name: str, template: dict, **spec: Any) -> client.V1Job:
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": template, **spec},
    }
    return batch(kube).create_namespaced_job("default", body)


def wait_job(kube: KubeClient, name: str, check: Callable[[client.V1Job], bool]) -> client.V1Job:
    found: list[client.V1Job] = []

    def ready() -> bool:
        job = batch(kube).read_namespaced_job(name, "default")
        if check(job):
            found.append(job)
        return bool(found)

    kube.wait_until(ready, f"job {name}")
    return found[0]


def job_condition(job: client.V1Job) -> tuple[str, str] | None:
    done = [c for c in job.status.conditions or [] if c.status == "True"]
    return (done[0].type, done[0].reason) if done else None


def job_pods(kube: KubeClient, name: str) -> list[client.V1Pod]:
    return kube.core.list_namespaced_pod("default", label_selector=f"job-name={name}").items


def test_job_runs_completions_with_parallelism(kube: KubeClient) -> None:
    created = create_job(
        kube, "pi", pod_template({"default": {"duration": 0.1}}), parallelism=2, completions=3
    )
    job = wait_job(kube, "pi", lambda j: job_condition(j) is not None)
    assert job_condition(job) == ("Complete", "CompletionsReached")
    assert (job.status.succeeded, job.status.failed, job.status.active) == (3, None, None)
    assert job.status.start_time <= job.status.completion_time
    pods = job_pods(kube, "pi")
    assert len(pods) == 3
    uid = created.metadata.uid
    for pod in pods:
        assert pod.metadata.name.startswith("pi-") and len(pod.metadata.name) == len("pi-") + 5
        assert pod.metadata.labels == {
            "app": "demo",
            "controller-uid": uid,
            "batch.kubernetes.io/controller-uid": uid,
            "job-name": "pi",
            "batch.kubernetes.io/job-name": "pi",
        }
        owner = pod.metadata.owner_references[0]
        assert (owner.api_version, owner.kind, owner.name, owner.uid, owner.controller) == (
            "batch/v1",
            "Job",
            "pi",
            uid,
            True,
        )
        assert pod.status.phase == "Succeeded"


def test_job_without_completions_is_done_when_one_succeeded_and_the_others_finished(kube: KubeClient) -> None:
    script = {"default": {"duration": 0.1}}
    create_job(kube, "queue", pod_template(script), parallelism=3)
    job = wait_job(kube, "queue", lambda j: job_condition(j) is not None)
    assert job_condition(job) == ("Complete", "CompletionsReached")
    assert job.status.succeeded == 3 and job.spec.completions is None
    assert len(job_pods(kube, "queue")) == 3  # no new pods after the first success


def test_job_fails_past_its_backoff_limit(kube: KubeClient) -> None:
    create_job(kube, "crash", pod_template({"default": {"duration": 0.05, "exit_code": 3}}), backoffLimit=1)
    job = wait_job(kube, "crash", lambda j: job_condition(j) is not None)
    assert job_condition(job) == ("Failed", "BackoffLimitExceeded")
    assert job.status.conditions[0].message == "Job has reached the specified backoff limit"
    assert job.status.failed == 2 and not job.status.succeeded
    assert sorted(p.status.phase for p in job_pods(kube, "crash")) == ["Failed", "Failed"]


def test_job_with_on_failure_counts_container_restarts(kube: KubeClient) -> None:
    template = pod_template({"default": {"duration": 0.05, "exit_code": 1, "backoff": 0.01}}, "OnFailure")
    create_job(kube, "loop", template, backoffLimit=2)
    job = wait_job(kube, "loop", lambda j: job_condition(j) is not None)
    assert job_condition(job) == ("Failed", "BackoffLimitExceeded")
    kube.wait_until(lambda: not job_pods(kube, "loop"), "the crash-looping pod to be deleted")


def test_job_fails_past_its_active_deadline(kube: KubeClient) -> None:
    create_job(kube, "slow", pod_template({"default": {"duration": None}}), activeDeadlineSeconds=1)
    job = wait_job(kube, "slow", lambda j: job_condition(j) is not None)
    assert job_condition(job) == ("Failed", "DeadlineExceeded")
    assert job.status.conditions[0].message == "Job was active longer than specified deadline"
    kube.wait_until(lambda: not job_pods(kube, "slow"), "the active pod to be deleted")


def test_a_suspended_job_has_no_pods_until_resumed(kube: KubeClient) -> None:
    create_job(kube, "pause", pod_template({"default": {"duration": None}}))
    kube.wait_until(lambda: len(job_pods(kube, "pause")) == 1, "the job's pod")

    batch(kube).patch_namespaced_job("pause", "default", {"spec": {"suspend": True}})
    suspended = wait_job(kube, "pause", lambda j: job_condition(j) == ("Suspended", "JobSuspended"))
    kube.wait_until(lambda: not job_pods(kube, "pause"), "the pod deleted")
    batch(kube).patch_namespaced_job("pause", "default", {"spec": {"suspend": False}})
    resumed = wait_job(kube, "pause", lambda j: bool(j.status.active))

    assert not suspended.status.active and suspended.status.start_time is None
    assert [(c.type, c.status, c.reason) for c in resumed.status.conditions] == [
        ("Suspended", "False", "JobResumed")
    ]
    assert len(job_pods(kube, "pause")) == 1


INDEX = "batch.kubernetes.io/job-completion-index"


def test_indexed_job_runs_one_pod_per_index(kube: KubeClient) -> None:
    template = pod_template({"default": {"duration": 0.05}})
    template["spec"]["subdomain"] = "workers"
    create_job(kube, "idx", template, completionMode="Indexed", completions=3, parallelism=2)
    job = wait_job(kube, "idx", lambda j: job_condition(j) is not None)

    assert job_condition(job) == ("Complete", "CompletionsReached")
    assert (job.status.succeeded, job.status.completed_indexes) == (3, "0-2")
    pods = sorted(job_pods(kube, "idx"), key=lambda p: int(p.metadata.labels[INDEX]))
    assert [p.metadata.labels[INDEX] for p in pods] == ["0", "1", "2"]
    for index, pod in enumerate(pods):
        assert pod.metadata.annotations[INDEX] == str(index)
        assert pod.metadata.name.startswith(f"idx-{index}-") and len(pod.metadata.name) == len("idx-0-") + 5
        assert (pod.spec.hostname, pod.spec.subdomain) == (f"idx-{index}", "workers")
        env = pod.spec.containers[0].env[-1]  # appended, from the label (PodIndexLabel, GA in 1.32)
        assert env.name == "JOB_COMPLETION_INDEX"
        assert env.value_from.field_ref.field_path == f"metadata.labels['{INDEX}']"
        assert pod.status.phase == "Succeeded"


def test_indexed_job_retries_a_failed_index_under_its_backoff_limit(kube: KubeClient) -> None:
    # The index reaches the scripted runtime as the replica index: `worker-1` is the pod of index 1.
    script = {"default": {"duration": 0.05}, "worker-1": {"exit_code": 4}}
    template = pod_template(script, **{"training.kubeflow.org/replica-type": "worker"})
    create_job(
        kube, "retry", template, completionMode="Indexed", completions=2, parallelism=2, backoffLimit=2
    )
    job = wait_job(kube, "retry", lambda j: job_condition(j) is not None)

    assert job_condition(job) == ("Failed", "BackoffLimitExceeded")
    assert (job.status.failed, job.status.completed_indexes) == (3, "0")
    by_index = sorted((p.metadata.labels[INDEX], p.status.phase) for p in job_pods(kube, "retry"))
    assert by_index == [("0", "Succeeded"), ("1", "Failed"), ("1", "Failed"), ("1", "Failed")]


def test_indexed_completion_ranges_read_as_the_job_controller_writes_them() -> None:
    assert format_indexes({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert format_indexes(set()) == ""
    assert parse_indexes("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}


def test_job_follows_a_parallelism_change(kube: KubeClient) -> None:
    create_job(kube, "elastic", pod_template({"default": {"duration": None}}), parallelism=1)
    wait_job(kube, "elastic", lambda j: j.status.ready == 1)
    batch(kube).patch_namespaced_job("elastic", "default", {"spec": {"parallelism": 3}})
    wait_job(kube, "elastic", lambda j: j.status.active == 3 and j.status.ready == 3)
    assert len(job_pods(kube, "elastic")) == 3
    batch(kube).patch_namespaced_job("elastic", "default", {"spec": {"parallelism": 2}})
    wait_job(kube, "elastic", lambda j: j.status.active == 2)
    kube.wait_until(lambda: len(job_pods(kube, "elastic")) == 2, "the scaled-down pod to go")


def test_replicaset_keeps_its_replicas(kube: KubeClient) -> None:
    apps = client.AppsV1Api(kube.api)
    template = pod_template({"default": {"duration": None}}, "Always", tier="ps")
    body = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "ps"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"tier": "ps"}}, "template": template},
    }
    created = apps.create_namespaced_replica_set("default", body)

    def status(check: Callable[[client.V1ReplicaSetStatus], bool]) -> None:
        kube.wait_until(lambda: check(apps.read_namespaced_replica_set("ps", "default").status), "rs status")

    status(lambda s: (s.replicas, s.ready_replicas, s.available_replicas) == (2, 2, 2))
    pods = kube.core.list_namespaced_pod("default", label_selector="tier=ps").items
    assert len(pods) == 2
    for pod in pods:
        assert pod.metadata.name.startswith("ps-") and len(pod.metadata.name) == len("ps-") + 5
        assert pod.metadata.labels == {"app": "demo", "tier": "ps"}
        assert pod.metadata.owner_references[0].uid == created.metadata.uid
    kube.core.delete_namespaced_pod(pods[0].metadata.name, "default")
    kube.wait_until(
        lambda: (
            {p.metadata.name for p in kube.core.list_namespaced_pod("default").items}
            - {pods[0].metadata.name}
            != {pods[1].metadata.name}
        ),
        "a replacement pod",
    )
    apps.patch_namespaced_replica_set("ps", "default", {"spec": {"replicas": 1}})
    status(lambda s: s.replicas == 1 and s.ready_replicas == 1)
    kube.wait_until(lambda: len(kube.core.list_namespaced_pod("default").items) == 1, "one pod left")


def test_default_cluster_runs_the_builtin_controllers(localkube: LocalKube) -> None:
    kube = KubeClient(localkube)
    try:
        create_job(kube, "default-pi", pod_template({"default": {"duration": 0.05}}))
        job = wait_job(kube, "default-pi", lambda j: job_condition(j) is not None)
        assert job_condition(job) == ("Complete", "CompletionsReached") and job.status.succeeded == 1
    finally:
        kube.api.close()


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("Pod", "spec.containers"),
        ("ReplicaSet.apps", "spec.template.spec.containers"),
        ("Job.batch", "spec.template.spec.containers"),
    ],
)
def test_a_pod_or_template_without_containers_is_refused(tmp_path: Path, kind: str, field: str) -> None:
    """As the real API server: 422 `<field>: Required value`, so no controller or runtime ever sees one."""
    template = {"metadata": {"labels": {"app": "empty"}}, "spec": {"containers": []}}
    with running(tmp_path) as kube:
        create = {
            "Pod": lambda: kube.core.create_namespaced_pod(
                "default", {"metadata": {"name": "empty"}, "spec": {"containers": []}}
            ),
            "ReplicaSet.apps": lambda: client.AppsV1Api(kube.api).create_namespaced_replica_set(
                "default",
                {
                    "metadata": {"name": "empty"},
                    "spec": {"selector": {"matchLabels": {"app": "empty"}}, "template": template},
                },
            ),
            "Job.batch": lambda: client.BatchV1Api(kube.api).create_namespaced_job(
                "default",
                {
                    "metadata": {"name": "empty"},
                    "spec": {"template": {**template, "spec": {"containers": [], "restartPolicy": "Never"}}},
                },
            ),
        }[kind]
        with pytest.raises(client.ApiException) as info:
            create()
        assert info.value.status == 422
        body = json.loads(info.value.body)
        assert body["message"] == f'{kind} "empty" is invalid: {field}: Required value'
        assert body["details"]["causes"] == [
            {"reason": "FieldValueRequired", "message": "Required value", "field": field}
        ]
        assert kube.core.list_namespaced_pod("default").items == []
