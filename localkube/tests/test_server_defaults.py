"""Built-in defaults over HTTP: what the real client gets back is what a real API server would return."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localkube.cluster import LocalKube
from localkube.defaults import JOB_NAME_LABEL, JOB_UID_LABEL
from localkube.resources import REPLICASETS

from tests.operators.harness import wait_for


def _template(labels: dict[str, str], restart_policy: str | None = None) -> client.V1PodTemplateSpec:
    return client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels),
        spec=client.V1PodSpec(
            restart_policy=restart_policy,
            containers=[client.V1Container(name="main", image="busybox", ports=[client.V1ContainerPort(80)])],
        ),
    )


def test_replica_set_comes_back_with_replicas_and_template_defaults(
    api_client: client.ApiClient, ns: str
) -> None:
    apps = client.AppsV1Api(api_client)
    body = client.V1ReplicaSet(
        metadata=client.V1ObjectMeta(name="pserver"),
        spec=client.V1ReplicaSetSpec(
            selector=client.V1LabelSelector(match_labels={"app": "ps"}), template=_template({"app": "ps"})
        ),
    )
    created = apps.create_namespaced_replica_set(ns, body)
    assert created.spec.replicas == 1 and created.status.replicas == 0
    pod_spec = created.spec.template.spec
    assert (pod_spec.restart_policy, pod_spec.termination_grace_period_seconds) == ("Always", 30)
    assert (pod_spec.dns_policy, pod_spec.scheduler_name) == ("ClusterFirst", "default-scheduler")
    container = pod_spec.containers[0]
    assert (container.image_pull_policy, container.termination_message_path) == (
        "Always",
        "/dev/termination-log",
    )
    assert container.ports[0].protocol == "TCP"
    assert pod_spec.service_account_name is None  # admission fills pods in, not templates

    def scaled() -> client.V1ReplicaSet | None:
        """Read, change, replace: again after a 409 (kube-controller-manager writes the status meanwhile)."""
        current = apps.read_namespaced_replica_set("pserver", ns)
        current.spec.replicas = 3
        try:
            return apps.replace_namespaced_replica_set("pserver", ns, current)
        except ApiException as exc:
            if exc.status != 409:
                raise
            return None

    replaced = wait_for(scaled)
    assert replaced.spec.replicas == 3 and replaced.metadata.generation == 2


def test_replica_set_status_never_omits_replicas(kube: LocalKube, api_client: client.ApiClient) -> None:
    """A controller's status write without replicas still reads back with the never-omitted field."""
    apps = client.AppsV1Api(api_client)
    body = client.V1ReplicaSet(
        metadata=client.V1ObjectMeta(name="pserver"),
        spec=client.V1ReplicaSetSpec(
            selector=client.V1LabelSelector(match_labels={"app": "ps"}), template=_template({"app": "ps"})
        ),
    )
    apps.create_namespaced_replica_set("default", body)
    kube.store.update_status(REPLICASETS, "default", "pserver", {"observedGeneration": 1})
    listed = apps.list_namespaced_replica_set("default").items
    assert [(rs.status.replicas, rs.status.observed_generation) for rs in listed] == [(0, 1)]


def test_job_defaults_and_generated_selector(api_client: client.ApiClient, ns: str) -> None:
    batch = client.BatchV1Api(api_client)
    body = client.V1Job(
        metadata=client.V1ObjectMeta(name="trainer"),
        spec=client.V1JobSpec(suspend=True, template=_template({"role": "trainer"}, restart_policy="Never")),
    )
    job = batch.create_namespaced_job(ns, body)
    spec = job.spec
    assert (spec.completions, spec.parallelism, spec.backoff_limit) == (1, 1, 6)
    assert (spec.completion_mode, spec.suspend, spec.pod_replacement_policy) == (
        "NonIndexed",
        True,
        "TerminatingOrFailed",
    )
    uid = job.metadata.uid
    assert spec.selector.match_labels == {JOB_UID_LABEL: uid}
    assert spec.template.metadata.labels == {
        "role": "trainer",
        JOB_UID_LABEL: uid,
        JOB_NAME_LABEL: "trainer",
        "controller-uid": uid,
        "job-name": "trainer",
    }
    assert job.metadata.labels == spec.template.metadata.labels  # copied after the selector's were added
    assert spec.template.spec.restart_policy == "Never" and job.status is not None

    queue = client.V1Job(
        metadata=client.V1ObjectMeta(name="queue", labels={"own": "label"}),
        spec=client.V1JobSpec(
            parallelism=3,
            suspend=True,
            manual_selector=True,
            selector=client.V1LabelSelector(match_labels={"q": "1"}),
            template=_template({"q": "1"}, restart_policy="OnFailure"),
        ),
    )
    work_queue = batch.create_namespaced_job(ns, queue)
    assert (work_queue.spec.completions, work_queue.spec.parallelism) == (None, 3)
    assert work_queue.spec.selector.match_labels == {"q": "1"}
    assert work_queue.metadata.labels == {"own": "label"}
    assert work_queue.spec.template.metadata.labels == {"q": "1"}


@pytest.mark.parametrize("policy", [None, "Always"])
def test_a_job_must_not_restart_always(api_client: client.ApiClient, ns: str, policy: str | None) -> None:
    body = client.V1Job(
        metadata=client.V1ObjectMeta(name="trainer"),
        spec=client.V1JobSpec(template=_template({"role": "trainer"}, restart_policy=policy)),
    )
    with pytest.raises(ApiException) as refused:
        client.BatchV1Api(api_client).create_namespaced_job(ns, body)
    status = json.loads(refused.value.body)
    assert (refused.value.status, status["reason"]) == (422, "Invalid")
    assert status["message"] == (
        'Job.batch "trainer" is invalid: spec.template.spec.restartPolicy: Required value: valid values: '
        '"OnFailure", "Never"'
    )
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.template.spec.restartPolicy"]


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("busybox:1.36", "IfNotPresent"),
        ("registry.local:5000/team/img", "Always"),
        ("registry.local:5000/team/img:v2", "IfNotPresent"),
        ("busybox@sha256:" + "a" * 64, "IfNotPresent"),
    ],
)
def test_image_pull_policy_follows_the_tag(core: client.CoreV1Api, ns: str, image: str, policy: str) -> None:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image=image)]),
    )
    assert core.create_namespaced_pod(ns, pod).spec.containers[0].image_pull_policy == policy


def _resources(**kinds: dict[str, str]) -> client.V1ResourceRequirements:
    return client.V1ResourceRequirements(**kinds)


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        (None, "BestEffort"),
        (_resources(requests={"cpu": "100m"}), "Burstable"),
        (_resources(limits={"cpu": "1", "memory": "1Gi"}), "Guaranteed"),
        (
            _resources(requests={"cpu": "1000m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"}),
            "Guaranteed",
        ),
        (_resources(requests={"cpu": "500m"}, limits={"cpu": "1", "memory": "1Gi"}), "Burstable"),
        (_resources(limits={"cpu": "1"}), "Burstable"),
    ],
)
def test_pod_starts_pending_with_its_qos_class(
    core: client.CoreV1Api, ns: str, resources: client.V1ResourceRequirements | None, qos: str
) -> None:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p"),
        spec=client.V1PodSpec(
            restart_policy="OnFailure",
            containers=[client.V1Container(name="c", image="busybox:1", resources=resources)],
        ),
        status=client.V1PodStatus(phase="Running"),
    )
    created = core.create_namespaced_pod(ns, pod)
    assert (created.status.phase, created.status.qos_class) == ("Pending", qos)
    spec = created.spec
    assert (spec.restart_policy, spec.service_account_name, spec.priority) == ("OnFailure", "default", 0)
    if resources is not None and resources.requests is None:  # a limit without a request requests it
        assert spec.containers[0].resources.requests == resources.limits
