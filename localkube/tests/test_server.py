"""The HTTP API through the real `kubernetes` 36 client: auth, discovery, CRUD, selectors, patches, delete."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localkube.cluster import LocalKube
from localkube.resources import PODS

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"


def pytorchjob(name: str, **labels: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}},
    }


def create(custom: client.CustomObjectsApi, body: dict, namespace: str = "default") -> dict:
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> dict:
    return json.loads(exc.value.body)


def test_request_without_token_is_401(kube: LocalKube, api_client: client.ApiClient) -> None:
    api_client.configuration.api_key = {}
    api_client.default_headers.pop("authorization", None)
    with pytest.raises(ApiException) as exc:
        client.CustomObjectsApi(api_client).list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert exc.value.status == 401
    assert status_of(exc)["reason"] == "Unauthorized" and status_of(exc)["kind"] == "Status"


def test_discovery(api_client: client.ApiClient) -> None:
    assert client.VersionApi(api_client).get_code().major == "1"  # asks for /version/
    assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
    groups = {g.name: g for g in client.ApisApi(api_client).get_api_versions().groups}
    assert groups["kubeflow.org"].preferred_version.version == "v1"
    assert {v.version for v in groups["kubeflow.org"].versions} == {"v1", "v1alpha1"}
    assert "batch.tensorstack.dev" in groups and "paddlepaddle.org" in groups and "mxnet.mlkube.io" in groups
    core = {r.name: r for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"pods", "pods/status", "pods/log", "services", "events", "configmaps"} <= set(core)
    kubeflow = client.CustomObjectsApi(api_client).get_api_resources(GROUP, VERSION)
    names = {r.name: r for r in kubeflow.resources}
    assert names["pytorchjobs"].kind == "PyTorchJob" and names["pytorchjobs"].namespaced
    assert "pytorchjobs/status" in names and "jaxjobs" in names
    t9k = client.CustomObjectsApi(api_client).get_api_resources("batch.tensorstack.dev", "v1beta1")
    assert {r.kind for r in t9k.resources} >= {
        "TensorFlowTrainingJob",
        "GenericJob",
        "BeamJob",
        "DeepSpeedJob",
    }


def test_create_get_and_create_errors(custom: client.CustomObjectsApi) -> None:
    created = create(custom, pytorchjob("a"))
    assert created["metadata"]["resourceVersion"] and created["metadata"]["generation"] == 1
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a") == created
    with pytest.raises(ApiException) as exists:
        create(custom, pytorchjob("a"))
    assert exists.value.status == 409 and status_of(exists)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as invalid:
        create(custom, pytorchjob("Not_Valid"))
    body = status_of(invalid)
    assert invalid.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "nope")
    assert status_of(missing)["message"] == 'pytorchjobs.kubeflow.org "nope" not found'
    generated = create(
        custom,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PyTorchJob",
            "metadata": {"generateName": "gen-"},
            "spec": {},
        },
    )
    assert generated["metadata"]["name"].startswith("gen-")


def test_list_with_selectors_and_cluster_wide(kube: LocalKube, custom: client.CustomObjectsApi) -> None:
    kube.create_namespaces("other")
    create(custom, pytorchjob("a", team="x"))
    create(custom, pytorchjob("b", team="y"))
    create(custom, pytorchjob("c"), namespace="other")

    def names(**kwargs: str) -> list[str]:
        found = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, **kwargs)
        return [item["metadata"]["name"] for item in found["items"]]

    assert names(label_selector="team=x") == ["a"]
    assert names(label_selector="team notin (x)") == ["b"]
    assert names(label_selector="!team") == []
    assert names(field_selector="metadata.name=b") == ["b"]
    everywhere = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector="team!=x")
    assert [i["metadata"]["name"] for i in everywhere["items"]] == ["c", "b"] or sorted(
        i["metadata"]["name"] for i in everywhere["items"]
    ) == ["b", "c"]
    with pytest.raises(ApiException) as bad:
        custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, label_selector="a in (")
    assert bad.value.status == 400


def test_pods_and_events_field_selectors(kube: LocalKube, core: client.CoreV1Api) -> None:
    for name in ("p1", "p2"):
        core.create_namespaced_pod(
            "default", {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        )
    kube.store.update_status(PODS, "default", "p2", {"phase": "Running"})
    running = core.list_namespaced_pod("default", field_selector="status.phase=Running")
    assert [p.metadata.name for p in running.items] == ["p2"]
    core.create_namespaced_event(
        "default",
        {"metadata": {"name": "e1"}, "reason": "Started", "involvedObject": {"kind": "Pod", "name": "p2"}},
    )
    events = core.list_namespaced_event(
        "default", field_selector="involvedObject.name=p2,involvedObject.kind=Pod"
    )
    assert [e.reason for e in events.items] == ["Started"]


def test_limit_and_continue(custom: client.CustomObjectsApi) -> None:
    for name in ("a", "b", "c"):
        create(custom, pytorchjob(name))
    first = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, limit=2)
    token = first["metadata"]["continue"]
    rest = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, limit=2, _continue=token)
    assert [i["metadata"]["name"] for i in first["items"] + rest["items"]] == ["a", "b", "c"]
    assert "continue" not in rest["metadata"]
    with pytest.raises(ApiException) as garbled:
        custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, limit=2, _continue="garbage!")
    assert garbled.value.status == 410 and status_of(garbled)["reason"] == "Expired"


def test_patches(custom: client.CustomObjectsApi, core: client.CoreV1Api) -> None:
    create(custom, pytorchjob("a", keep="1", drop="2"))
    merged = custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "a", {"metadata": {"labels": {"drop": None, "new": "3"}}}
    )
    assert merged["metadata"]["labels"] == {"keep": "1", "new": "3"}
    patched = custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "a",
        [{"op": "replace", "path": "/spec/pytorchReplicaSpecs/Master/replicas", "value": 2}],
        _content_type="application/json-patch+json",  # 36.x sends a list body as merge-patch otherwise
    )
    assert patched["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 2
    assert patched["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as refused:
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            "a",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert refused.value.status == 415 and status_of(refused)["reason"] == "UnsupportedMediaType"
    assert "accepted media types include" in status_of(refused)["message"]
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "main", "image": "a"}, {"name": "side", "image": "b"}]},
        },
    )
    pod = core.patch_namespaced_pod(
        "p", "default", {"spec": {"containers": [{"name": "side", "image": "c"}]}}
    )
    assert [(c.name, c.image) for c in pod.spec.containers] == [("main", "a"), ("side", "c")]


def test_replace_with_stale_version_conflicts(custom: client.CustomObjectsApi) -> None:
    stale = create(custom, pytorchjob("a"))
    fresh = dict(stale, spec={"changed": True})
    replaced = custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a", fresh)
    assert replaced["spec"] == {"changed": True}
    with pytest.raises(ApiException) as conflict:
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a", stale)
    assert conflict.value.status == 409 and status_of(conflict)["reason"] == "Conflict"
    assert "the object has been modified" in status_of(conflict)["message"]


def test_status_subresource_isolation(custom: client.CustomObjectsApi) -> None:
    create(custom, pytorchjob("a"))
    after = custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "a",
        {"status": {"conditions": [{"type": "Created"}]}, "spec": {"x": 1}},
    )
    assert after["status"]["conditions"] == [{"type": "Created"}] and "x" not in after["spec"]
    main = custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "a", {"status": {"conditions": []}, "spec": {"y": 2}}
    )
    assert main["status"]["conditions"] == [{"type": "Created"}] and main["spec"]["y"] == 2
    assert main["metadata"]["generation"] == 2 and after["metadata"]["generation"] == 1


def test_delete_collects_children_and_waits_for_finalizers(
    custom: client.CustomObjectsApi, core: client.CoreV1Api
) -> None:
    body = pytorchjob("a")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    owner = create(custom, body)
    ref = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "name": "a",
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "a-master-0", "ownerReferences": [ref]},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        },
    )
    core.create_namespaced_service(
        "default",
        {"metadata": {"name": "a-master-0", "ownerReferences": [ref]}, "spec": {"clusterIP": "None"}},
    )
    marked = custom.delete_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "a", propagation_policy="Foreground"
    )
    assert marked["metadata"]["deletionTimestamp"]
    assert core.list_namespaced_pod("default").items == []
    assert core.list_namespaced_service("default").items == []
    held = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a")
    assert held["metadata"]["finalizers"] == ["example.com/hold"]
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "a", {"metadata": {"finalizers": None}}
    )
    with pytest.raises(ApiException) as gone:
        custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a")
    assert gone.value.status == 404


def test_delete_orphan_keeps_children(custom: client.CustomObjectsApi, core: client.CoreV1Api) -> None:
    owner = create(custom, pytorchjob("a"))
    ref = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "name": "a",
        "uid": owner["metadata"]["uid"],
    }
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "kept", "ownerReferences": [ref]},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        },
    )
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "a", propagation_policy="Orphan"
    )
    kept = core.read_namespaced_pod("kept", "default")
    assert kept.metadata.owner_references is None


def test_call_runs_on_the_cluster_loop(kube: LocalKube) -> None:
    async def on_loop(value: int) -> tuple[int, bool]:
        return value, asyncio.get_running_loop() is kube.loop

    assert kube.call(on_loop, 7) == (7, True)
    assert kube.call(threading.current_thread) is not threading.current_thread()
