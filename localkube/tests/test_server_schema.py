"""With the upstream CRDs loaded, objects are validated and pruned; violations are 422 naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localkube.cluster import LocalKube

CRDS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "crds" / "kubeflow.org-v1"


@pytest.fixture
def kube() -> Iterator[LocalKube]:
    """localkube validating against the upstream CRDs, as the real server (which has them installed) does."""
    with LocalKube(controllers=[], runtime="none", crd_dir=CRDS) as cluster:
        yield cluster


def pytorchjob(replicas: object, **extra: object) -> dict:
    master = {
        "replicas": replicas,
        "restartPolicy": "OnFailure",
        "template": {"spec": {"containers": [{"name": "pytorch", "image": "pytorch:2"}]}},
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "job"},
        "spec": {"pytorchReplicaSpecs": {"Master": master}, **extra},
    }


def test_schema_violation_is_422_naming_the_field(custom: client.CustomObjectsApi, ns: str) -> None:
    with pytest.raises(ApiException) as invalid:
        custom.create_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", pytorchjob("two"))
    body = json.loads(invalid.value.body)
    assert invalid.value.status == 422 and body["reason"] == "Invalid"
    assert "spec.pytorchReplicaSpecs.Master.replicas" in body["message"]
    assert body["details"]["causes"][0]["field"] == "spec.pytorchReplicaSpecs.Master.replicas"


def test_unknown_fields_are_pruned(custom: client.CustomObjectsApi, ns: str) -> None:
    created = custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", ns, "pytorchjobs", pytorchjob(1, misspelledField=True)
    )
    assert "misspelledField" not in created["spec"]
    assert created["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    with pytest.raises(ApiException) as invalid:
        custom.patch_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            ns,
            "pytorchjobs",
            "job",
            {"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": "x"}}}},
        )
    assert invalid.value.status == 422


def test_a_strict_create_refuses_unknown_fields_with_400_naming_each(
    custom: client.CustomObjectsApi, ns: str
) -> None:
    job = pytorchjob(1, misspelledField=True, runPolicy={"cleanPodPolicy": "None", "backofLimit": 3})
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["imag"] = "x"
    job["spec"]["nulled"] = None  # undeclared: refused though null
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"] = (
        None  # dropped
    )

    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", ns, "pytorchjobs", job, field_validation="Strict"
        )

    body = json.loads(refused.value.body)
    assert (refused.value.status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == (
        'PyTorchJob in version "v1" cannot be handled as a PyTorchJob: strict decoding error: '
        'unknown field "spec.misspelledField", unknown field "spec.nulled", unknown field '
        '"spec.pytorchReplicaSpecs.Master.template.spec.containers[0].imag", unknown field '
        '"spec.runPolicy.backofLimit"'
    )
    names = [
        j["metadata"]["name"]
        for j in custom.list_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs")["items"]
    ]
    assert names == []  # nothing created
