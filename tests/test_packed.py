"""``slim.Packed``: a watched object kept deflated against its family's preset dictionary, unpacked whole."""

from __future__ import annotations

import copy
import marshal
import sys

from airflow_provider_training.kinds.base import PODS
from airflow_provider_training.slim import Packed, trim


def pod(name: str, job: str, phase: str = "Running") -> dict:
    """A pod as localkube serves one of a PyTorchJob's replicas (the parts the hub keeps, and more)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "resourceVersion": "71",
            "creationTimestamp": "2026-12-03T10:28:16Z",
            "labels": {
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/job-name": job,
                "training.kubeflow.org/replica-type": "master",
                "training.kubeflow.org/replica-index": "0",
            },
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": job, "uid": f"uid-{job}"}
            ],
        },
        "spec": {"nodeName": "localkube", "restartPolicy": "Never", "containers": [{"name": "pytorch"}]},
        "status": {
            "phase": phase,
            "startTime": "2026-12-03T10:28:16Z",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-12-03T10:28:16Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {"name": "pytorch", "ready": True, "restartCount": 0, "state": {"running": {}}}
            ],
        },
    }


def test_an_object_comes_back_whole_and_its_own_each_time():
    obj = trim(pod("a-master-0", "a"), PODS)
    packed = Packed(copy.deepcopy(obj), PODS.key)

    first, second = packed.unpack(), packed.unpack()

    assert first == obj and second == obj and first is not second
    first["status"]["phase"] = "changed by a reader"
    assert packed.unpack()["status"]["phase"] == "Running"
    assert all(sys.intern(key) is key for key in first["metadata"])  # keys shared again
    assert (packed.name, packed.resource_version, packed.label("training.kubeflow.org/job-name")) == (
        "a-master-0",
        "71",
        "a",
    )


def test_objects_of_one_family_are_kept_in_a_fraction_of_their_bytes():
    """The family's first object is the dictionary of the others: a sibling pod (another job's, another
    phase) keeps little more than what differs, far below what deflate alone makes of it."""
    Packed(trim(pod("first-master-0", "first"), PODS), "pods-of-this-test")
    sibling = trim(pod("b-master-0", "b", phase="Succeeded"), PODS)
    raw = len(marshal.dumps(sibling))

    packed = Packed(sibling, "pods-of-this-test")

    assert packed.unpack() == sibling
    assert packed.size < raw / 3, (packed.size, raw)


def test_families_do_not_mix_and_an_object_without_kind_has_one():
    a = Packed({"metadata": {"name": "x"}, "spec": {"replicas": 2}}, "family-a")
    b = Packed({"metadata": {"name": "y"}, "data": [1, 2.5, None, True, "s"]}, "family-b")
    marker = Packed({"metadata": {"name": "gone"}})

    assert a.unpack() == {"metadata": {"name": "x"}, "spec": {"replicas": 2}}
    assert b.unpack() == {"metadata": {"name": "y"}, "data": [1, 2.5, None, True, "s"]}
    assert marker.unpack() == {"metadata": {"name": "gone"}} and marker.labels == {}
