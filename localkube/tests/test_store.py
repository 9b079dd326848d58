"""Store semantics without HTTP: metadata, selectors, status isolation, patches, GC, finalizers, history."""

from __future__ import annotations

import asyncio

import pytest
from localkube.resources import BATCH_JOBS, EVENTS, NAMESPACES, PODS, ResourceType
from localkube.store import ApiError, Store

PYTORCH = ResourceType("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", "pytorchjob")
POD_SPEC = {"containers": [{"name": "main", "image": "busybox"}]}


def job(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"replicas": 1}, "status": {"x": 1}}


def owned(name: str, owner: dict, spec: dict | None = None) -> dict:
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    return {"metadata": {"name": name, "ownerReferences": [ref]}, "spec": spec or POD_SPEC}


@pytest.fixture
def store() -> Store:
    store = Store(history_size=5)
    for namespace in ("ns", "other"):
        store.create(NAMESPACES, "", {"metadata": {"name": namespace}})
    return store


def test_create_sets_server_metadata_and_drops_custom_status(store: Store) -> None:
    before = int(store.resource_version)  # the `default` namespace is the first object
    created = store.create(PYTORCH, "ns", job("a"))
    meta = created["metadata"]
    assert (meta["namespace"], meta["generation"]) == ("ns", 1)
    assert meta["resourceVersion"] == store.resource_version == str(before + 1)
    assert len(meta["uid"]) == 36 and meta["creationTimestamp"].endswith("Z")
    assert "status" not in created and created["apiVersion"] == "kubeflow.org/v1"
    pod_status = store.create(PODS, "ns", {"metadata": {"name": "p"}, "spec": POD_SPEC})["status"]
    assert pod_status == {"phase": "Pending", "qosClass": "BestEffort"}


def test_create_errors(store: Store) -> None:
    store.create(PYTORCH, "ns", job("a"))
    with pytest.raises(ApiError) as exists:
        store.create(PYTORCH, "ns", job("a"))
    assert (exists.value.code, exists.value.reason) == (409, "AlreadyExists")
    with pytest.raises(ApiError) as invalid:
        store.create(PYTORCH, "ns", job("Bad_Name"))
    assert invalid.value.code == 422
    assert invalid.value.details["causes"][0]["field"] == "metadata.name"
    assert invalid.value.message.startswith('PyTorchJob.kubeflow.org "Bad_Name" is invalid: metadata.name')
    generated = store.create(PYTORCH, "ns", {"metadata": {"generateName": "run-"}})
    assert generated["metadata"]["name"].startswith("run-") and len(generated["metadata"]["name"]) == 9


def test_label_and_field_selectors(store: Store) -> None:
    store.create(PYTORCH, "ns", job("a", team="x", tier="1"))
    store.create(PYTORCH, "ns", job("b", team="y"))
    store.create(PYTORCH, "other", job("c"))

    def names(**kwargs: str) -> list[str]:
        return [o["metadata"]["name"] for o in store.list(PYTORCH, kwargs.pop("ns", None), **kwargs)]

    assert names(label_selector="team=x") == ["a"]
    assert names(label_selector="team==y") == ["b"]
    assert names(label_selector="team!=x") == ["b", "c"]
    assert names(label_selector="team in (x, y),tier") == ["a"]
    assert names(label_selector="team notin (y)") == ["a", "c"]
    assert names(label_selector="!team") == ["c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(ns="ns", field_selector="metadata.namespace!=ns") == []
    with pytest.raises(ApiError) as bad:
        store.list(PYTORCH, field_selector="status.phase=Running")
    assert (bad.value.code, bad.value.message) == (400, "field label not supported: status.phase")


def test_pod_phase_and_event_field_selectors(store: Store) -> None:
    store.create(PODS, "ns", {"metadata": {"name": "p"}, "spec": POD_SPEC})
    store.update_status(PODS, "ns", "p", {"phase": "Running"})
    assert len(store.list(PODS, "ns", field_selector="status.phase=Running")) == 1
    store.create(EVENTS, "ns", {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p"}})
    assert len(store.list(EVENTS, "ns", field_selector="involvedObject.name=p,involvedObject.kind=Pod")) == 1


def test_paging_and_expired_continue(store: Store) -> None:
    for name in "abc":
        store.create(PYTORCH, "ns", job(name))
    first = store.list_page(PYTORCH, "ns", limit=2)
    assert [o["metadata"]["name"] for o in first.items] == ["a", "b"] and first.continue_token
    assert first.remaining == 1
    token = first.continue_token
    store.create(PYTORCH, "ns", job("d"))
    rest = store.list_page(PYTORCH, "ns", limit=2, continue_token=token)
    assert [o["metadata"]["name"] for o in rest.items] == ["c", "d"] and rest.continue_token is None
    assert rest.resource_version == first.resource_version and rest.remaining is None
    for i in range(6):
        store.update_status(PYTORCH, "ns", "a", {"n": i})
    with pytest.raises(ApiError) as expired:
        store.list_page(PYTORCH, "ns", limit=2, continue_token=token)
    assert expired.value.code == 410
    with pytest.raises(ApiError) as garbled:
        store.list_page(PYTORCH, "ns", continue_token="%%%")
    assert (garbled.value.code, garbled.value.reason) == (400, "BadRequest")


def test_status_isolation_and_generation(store: Store) -> None:
    store.create(PYTORCH, "ns", job("a"))
    after_status = store.replace(
        PYTORCH,
        "ns",
        "a",
        {"metadata": {"name": "a"}, "spec": {"replicas": 9}, "status": {"state": "done"}},
        subresource="status",
    )
    assert after_status["spec"] == {"replicas": 1} and after_status["status"] == {"state": "done"}
    assert after_status["metadata"]["generation"] == 1
    main = store.patch(
        PYTORCH,
        "ns",
        "a",
        {"spec": {"replicas": 2}, "status": {"state": "x"}},
        "application/merge-patch+json",
    )
    assert main["spec"] == {"replicas": 2} and main["status"] == {"state": "done"}
    assert main["metadata"]["generation"] == 2
    labelled = store.patch(
        PYTORCH, "ns", "a", {"metadata": {"labels": {"k": "v"}}}, "application/merge-patch+json"
    )
    assert labelled["metadata"]["generation"] == 2
    unchanged = store.patch(
        PYTORCH, "ns", "a", {"metadata": {"labels": {"k": "v"}}}, "application/merge-patch+json"
    )
    assert unchanged["metadata"]["resourceVersion"] == labelled["metadata"]["resourceVersion"]


def test_replace_conflict_and_patch_types(store: Store) -> None:
    created = store.create(PYTORCH, "ns", job("a"))
    store.patch(
        PYTORCH,
        "ns",
        "a",
        [{"op": "replace", "path": "/spec/replicas", "value": 3}],
        "application/json-patch+json",
    )
    with pytest.raises(ApiError) as conflict:
        store.replace(PYTORCH, "ns", "a", created)
    assert (conflict.value.code, conflict.value.reason) == (409, "Conflict")
    with pytest.raises(ApiError) as refused:
        store.patch(PYTORCH, "ns", "a", {"spec": {}}, "application/strategic-merge-patch+json")
    assert refused.value.code == 415 and "accepted media types include" in refused.value.message
    store.create(
        PODS,
        "ns",
        {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
        },
    )
    pod = store.patch(
        PODS,
        "ns",
        "p",
        {"spec": {"containers": [{"name": "b", "image": "z"}]}},
        "application/strategic-merge-patch+json",
    )
    assert [c["image"] for c in pod["spec"]["containers"]] == ["x", "z"]


def test_delete_garbage_collects_and_orphans(store: Store) -> None:
    owner = store.create(PYTORCH, "ns", job("a"))
    pod = store.create(PODS, "ns", owned("a-worker-0", owner))
    store.create(PODS, "ns", owned("grandchild", pod))
    store.delete(PYTORCH, "ns", "a")
    assert store.list(PODS, "ns") == []
    owner = store.create(PYTORCH, "ns", job("b"))
    template = {"spec": {**POD_SPEC, "restartPolicy": "Never"}}
    store.create(BATCH_JOBS, "ns", owned("kept", owner, {"template": template}))
    store.delete(PYTORCH, "ns", "b", propagation_policy="Orphan")
    assert "ownerReferences" not in store.get(BATCH_JOBS, "ns", "kept")["metadata"]


def test_finalizers_and_foreground(store: Store) -> None:
    body = job("a")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    owner = store.create(PYTORCH, "ns", body)
    store.create(PODS, "ns", owned("child", owner))
    marked = store.delete(PYTORCH, "ns", "a", propagation_policy="Foreground")
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["finalizers"] == ["example.com/keep", "foregroundDeletion"]
    assert store.list(PODS, "ns") == []
    assert store.get(PYTORCH, "ns", "a")["metadata"]["finalizers"] == ["example.com/keep"]
    store.patch(PYTORCH, "ns", "a", {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    with pytest.raises(ApiError) as gone:
        store.get(PYTORCH, "ns", "a")
    assert gone.value.code == 404 and gone.value.message == 'pytorchjobs.kubeflow.org "a" not found'


async def test_watch_history_and_expiry(store: Store) -> None:
    first = store.create(PYTORCH, "ns", job("a"))
    store.patch(PYTORCH, "ns", "a", {"spec": {"replicas": 2}}, "application/merge-patch+json")
    initial, sub = store.watch(PYTORCH, "ns", first["metadata"]["resourceVersion"])
    with sub:
        assert [ev.type for ev in initial] == ["MODIFIED"]
        await asyncio.to_thread(store.delete, PYTORCH, "ns", "a")
        event = await asyncio.wait_for(anext(sub), 5)
        assert event.type == "DELETED" and event.object["spec"] == {"replicas": 2}
    for i in range(6):
        store.create(PODS, "ns", {"metadata": {"name": f"p{i}"}, "spec": POD_SPEC})
    with pytest.raises(ApiError) as expired:
        store.watch(PYTORCH, "ns", "1")
    assert expired.value.code == 410 and expired.value.message.startswith("too old resource version: 1 (")


def test_secondary_index_follows_writes_and_deletes(store: Store) -> None:
    store.create(PODS, "ns", {"metadata": {"name": "before", "labels": {"app": "x"}}, "spec": POD_SPEC})
    store.add_index(PODS, "app", lambda obj: (obj["metadata"].get("labels") or {}).get("app"))
    store.add_index(PODS, "app", lambda obj: "ignored: the name is taken")
    store.create(PODS, "ns", {"metadata": {"name": "after", "labels": {"app": "x"}}, "spec": POD_SPEC})
    store.create(PODS, "ns", {"metadata": {"name": "unlabelled"}, "spec": POD_SPEC})
    assert [p["metadata"]["name"] for p in store.by_index(PODS, "app", "x")] == ["before", "after"]
    store.patch(
        PODS, "ns", "before", {"metadata": {"annotations": {"a": "b"}}}, "application/merge-patch+json"
    )
    assert [p["metadata"]["name"] for p in store.by_index(PODS, "app", "x")] == ["after", "before"]
    assert [p["metadata"]["name"] for p in store.by_index(PODS, "app", "x", limit=1)] == ["after"]
    store.patch(PODS, "ns", "after", {"metadata": {"labels": {"app": "y"}}}, "application/merge-patch+json")
    store.delete(PODS, "ns", "before")
    assert store.by_index(PODS, "app", "x") == [] and store.index_count(PODS, "app", "y") == 1
    with pytest.raises(KeyError):
        store.by_index(EVENTS, "app", "x")
