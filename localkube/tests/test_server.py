"""The HTTP API through the real `kubernetes` 36 client: auth, discovery, CRUD, selectors, patches, delete.

Every test but the last runs against localkube and, with ``REALKUBE_BIN`` set, a real kube-apiserver too
(``server`` in conftest.py): objects are valid for the upstream CRDs the real server validates against.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from conftest import Server
from kubernetes import client
from kubernetes.client.rest import ApiException
from localkube.cluster import LocalKube

from tests.operators.harness import wait_for

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
POD_SPEC = {"containers": [{"name": "c", "image": "busybox"}]}


def pytorchjob(name: str, **labels: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}},
    }


def create(custom: client.CustomObjectsApi, body: dict, namespace: str) -> dict:
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> dict:
    return json.loads(exc.value.body)


def names_of(listed: dict) -> list[str]:
    return [item["metadata"]["name"] for item in listed["items"]]


def test_request_with_a_wrong_token_is_401(api_client: client.ApiClient, ns: str) -> None:
    api_client.configuration.api_key = {"authorization": "Bearer wrong"}
    api_client.configuration.refresh_api_key_hook = None  # the kubeconfig loader's would set it back
    with pytest.raises(ApiException) as exc:
        client.CustomObjectsApi(api_client).list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
    assert exc.value.status == 401
    assert status_of(exc) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }


def test_a_request_without_credentials_is_anonymous(server: Server, ns: str) -> None:
    """kube-apiserver authenticates it as system:anonymous, whom RBAC grants the version and health checks
    only (system:public-info-viewer)."""
    assert server.anonymous("GET", "/version")[0] == 200
    assert server.anonymous("GET", "/readyz") == (200, b"ok")
    cases = {
        ("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}"): (
            f'pytorchjobs.kubeflow.org is forbidden: User "system:anonymous" cannot list resource '
            f'"pytorchjobs" in API group "kubeflow.org" in the namespace "{ns}"',
            {"group": GROUP, "kind": PLURAL},
        ),
        ("DELETE", f"/api/v1/namespaces/{ns}/pods/p"): (
            f'pods "p" is forbidden: User "system:anonymous" cannot delete resource "pods" in API group "" '
            f'in the namespace "{ns}"',
            {"name": "p", "kind": "pods"},
        ),
        ("GET", f"/api/v1/namespaces/{ns}/pods/p/log"): (
            f'pods "p" is forbidden: User "system:anonymous" cannot get resource "pods/log" in API group "" '
            f'in the namespace "{ns}"',
            {"name": "p", "kind": "pods"},
        ),
        ("GET", "/api/v1/nodes"): (
            'nodes is forbidden: User "system:anonymous" cannot list resource "nodes" in API group "" at the '
            "cluster scope",
            {"kind": "nodes"},
        ),
        ("GET", "/apis"): ('forbidden: User "system:anonymous" cannot get path "/apis"', {}),
    }
    for (method, path), (message, details) in cases.items():
        code, body = server.anonymous(method, path)
        status = json.loads(body)
        assert (code, status["reason"], status["message"]) == (403, "Forbidden", message), path
        assert status["details"] == details, path


def test_discovery(api_client: client.ApiClient) -> None:
    assert client.VersionApi(api_client).get_code().major == "1"  # asks for /version/
    assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
    groups = {g.name: g for g in client.ApisApi(api_client).get_api_versions().groups}
    assert groups["kubeflow.org"].preferred_version.version == "v1"
    core = {r.name: r for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"pods", "pods/status", "pods/log", "services", "events", "configmaps"} <= set(core)
    assert core["pods"].short_names == ["po"] and "deletecollection" in core["pods"].verbs
    assert "deletecollection" not in core["namespaces"].verbs
    assert (core["pods/binding"].kind, core["pods/binding"].verbs) == ("Binding", ["create"])
    kubeflow = client.CustomObjectsApi(api_client).get_api_resources(GROUP, VERSION)
    names = {r.name: r for r in kubeflow.resources}
    assert names["pytorchjobs"].kind == "PyTorchJob" and names["pytorchjobs"].namespaced
    assert names["pytorchjobs"].singular_name == "pytorchjob"
    assert set(names["pytorchjobs"].verbs) == {
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    }
    assert set(names["pytorchjobs/status"].verbs) == {"get", "patch", "update"}
    assert "jaxjobs" in names


def test_discovery_of_the_built_in_families(kube: LocalKube, api_client: client.ApiClient) -> None:
    """localkube serves every family's group without CRDs (a real cluster serves the CRDs installed)."""
    groups = {g.name: g for g in client.ApisApi(api_client).get_api_versions().groups}
    assert {v.version for v in groups["kubeflow.org"].versions} == {"v1", "v1alpha1"}
    assert "batch.tensorstack.dev" in groups and "paddlepaddle.org" in groups and "mxnet.mlkube.io" in groups
    t9k = client.CustomObjectsApi(api_client).get_api_resources("batch.tensorstack.dev", "v1beta1")
    assert {r.kind for r in t9k.resources} >= {
        "TensorFlowTrainingJob",
        "GenericJob",
        "BeamJob",
        "DeepSpeedJob",
    }


def test_create_get_and_create_errors(custom: client.CustomObjectsApi, ns: str) -> None:
    created = create(custom, pytorchjob("a"), ns)
    assert created["metadata"]["resourceVersion"] and created["metadata"]["generation"] == 1
    assert custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "a") == created
    with pytest.raises(ApiException) as exists:
        create(custom, pytorchjob("a"), ns)
    assert exists.value.status == 409 and status_of(exists)["reason"] == "AlreadyExists"
    assert status_of(exists)["message"] == 'pytorchjobs.kubeflow.org "a" already exists'
    with pytest.raises(ApiException) as invalid:
        create(custom, pytorchjob("Not_Valid"), ns)
    body = status_of(invalid)
    assert invalid.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    assert body["message"].startswith('PyTorchJob.kubeflow.org "Not_Valid" is invalid: metadata.name')
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "nope")
    assert status_of(missing)["message"] == 'pytorchjobs.kubeflow.org "nope" not found'
    assert status_of(missing)["details"] == {"name": "nope", "group": GROUP, "kind": PLURAL}
    generated = create(custom, dict(pytorchjob(""), metadata={"generateName": "gen-"}), ns)
    assert generated["metadata"]["name"].startswith("gen-") and len(generated["metadata"]["name"]) == 9


def test_list_with_selectors_and_cluster_wide(
    server: Server, custom: client.CustomObjectsApi, ns: str
) -> None:
    other = server.create_namespace("other")
    create(custom, pytorchjob("a", team="x"), ns)
    create(custom, pytorchjob("b", team="y"), ns)
    create(custom, pytorchjob("c"), other)

    def names(**kwargs: str) -> list[str]:
        return names_of(custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, **kwargs))

    assert names(label_selector="team=x") == ["a"]
    assert names(label_selector="team notin (x)") == ["b"]
    assert names(label_selector="!team") == []
    assert names(label_selector="team in (x,y),team!=y") == ["a"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b") == ["a"]
    assert names(field_selector=f"metadata.namespace={ns}") == ["a", "b"]
    everywhere = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector="team!=x")
    mine = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere["items"]]
    assert sorted(m for m in mine if m[0] in (ns, other)) == sorted([(ns, "b"), (other, "c")])
    with pytest.raises(ApiException) as bad:
        custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, label_selector="a in (")
    assert bad.value.status == 400 and status_of(bad)["reason"] == "BadRequest"
    with pytest.raises(ApiException) as unknown_field:
        custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, field_selector="spec.x=1")
    assert unknown_field.value.status == 400 and status_of(unknown_field)["reason"] == "BadRequest"


@pytest.mark.kube_runtime("scripted")
def test_pods_and_events_field_selectors(core: client.CoreV1Api, ns: str) -> None:
    """Both servers' kubelets (localkube's scripted runtime, the agent's) run the pods: one runs until it is
    deleted, the other is held Pending as Unschedulable."""
    scripts = {"p1": {"default": {"pending": "Unschedulable"}}, "p2": {"default": {"duration": None}}}
    for name, script in scripts.items():
        core.create_namespaced_pod(
            ns,
            {
                "metadata": {"name": name, "annotations": {"localkube.dev/script": json.dumps(script)}},
                "spec": POD_SPEC,
            },
        )
    wait_for(lambda: core.read_namespaced_pod("p2", ns).status.phase == "Running")
    running = core.list_namespaced_pod(ns, field_selector="status.phase=Running")
    assert [p.metadata.name for p in running.items] == ["p2"]
    pending = core.list_namespaced_pod(ns, field_selector="status.phase!=Running,spec.nodeName=")
    assert [p.metadata.name for p in pending.items] == ["p1"]
    core.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e1"},
            "reason": "Tested",
            "involvedObject": {"kind": "Pod", "name": "p2", "namespace": ns},
        },
    )
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=p2,reason=Tested")
    assert [e.metadata.name for e in events.items] == ["e1"]


def test_limit_and_continue(custom: client.CustomObjectsApi, ns: str) -> None:
    for name in ("a", "b", "c"):
        create(custom, pytorchjob(name), ns)
    first = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, limit=2)
    token = first["metadata"]["continue"]
    assert first["metadata"]["remainingItemCount"] == 1
    rest = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, limit=2, _continue=token)
    assert names_of(first) + names_of(rest) == ["a", "b", "c"]
    assert rest["metadata"]["continue"] == "" and "remainingItemCount" not in rest["metadata"]
    assert rest["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]  # one snapshot
    with pytest.raises(ApiException) as garbled:
        custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, limit=2, _continue="garbage!")
    assert garbled.value.status == 400 and status_of(garbled)["reason"] == "BadRequest"
    with pytest.raises(ApiException) as bad_limit:
        custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, limit="two")
    assert status_of(bad_limit)["message"] == 'strconv.ParseInt: parsing "two": invalid syntax'
    unlimited = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, limit=0)
    assert names_of(unlimited) == ["a", "b", "c"] and unlimited["metadata"]["continue"] == ""


def test_patches(custom: client.CustomObjectsApi, core: client.CoreV1Api, ns: str) -> None:
    create(custom, pytorchjob("a", keep="1", drop="2"), ns)

    def patch(body: object, media: str = "application/merge-patch+json") -> dict:
        # 36.x sends a list body as merge-patch unless told the type
        return custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "a", body, _content_type=media
        )

    merged = patch({"metadata": {"labels": {"drop": None, "new": "3"}}})
    assert merged["metadata"]["labels"] == {"keep": "1", "new": "3"}
    replicas = "/spec/pytorchReplicaSpecs/Master/replicas"
    patched = patch([{"op": "replace", "path": replicas, "value": 2}], "application/json-patch+json")
    assert patched["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 2
    assert patched["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as failed_test:
        patch([{"op": "test", "path": replicas, "value": 5}], "application/json-patch+json")
    assert status_of(failed_test) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server rejected our request due to an error in our request",
        "reason": "Invalid",
        "details": {},
        "code": 422,
    }
    with pytest.raises(ApiException) as refused:
        patch({"spec": {}}, "application/strategic-merge-patch+json")
    assert refused.value.status == 415 and status_of(refused)["reason"] == "UnsupportedMediaType"
    assert "accepted media types include" in status_of(refused)["message"]
    with pytest.raises(ApiException) as no_manager:
        patch({"metadata": {"labels": {"applied": "yes"}}}, "application/apply-patch+yaml")
    assert no_manager.value.status == 422 and status_of(no_manager)["details"]["causes"][0]["field"] == (
        "fieldManager"
    )
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    cm = core.patch_namespaced_config_map("cm", ns, {"data": {"b": "2"}})
    assert cm.data == {"a": "1", "b": "2"}
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "main", "image": "a"}, {"name": "side", "image": "b"}],
                "nodeName": "nowhere",  # no kubelet runs it: its spec and status stay the test's
            },
        },
    )
    pod = core.patch_namespaced_pod(
        "p",
        ns,
        {"metadata": {"labels": {"x": "1"}}, "spec": {"containers": [{"name": "side", "image": "c"}]}},
    )
    assert [(c.name, c.image) for c in pod.spec.containers] == [("main", "a"), ("side", "c")]
    assert pod.metadata.labels == {"x": "1"}


def test_replace_with_stale_version_conflicts(custom: client.CustomObjectsApi, ns: str) -> None:
    stale = create(custom, pytorchjob("a"), ns)
    fresh = dict(stale, spec={"pytorchReplicaSpecs": {"Master": {"replicas": 2}}})
    replaced = custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "a", fresh)
    assert replaced["spec"] == fresh["spec"] and replaced["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as conflict:
        custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "a", stale)
    assert conflict.value.status == 409 and status_of(conflict)["reason"] == "Conflict"
    assert status_of(conflict)["message"] == (
        'Operation cannot be fulfilled on pytorchjobs.kubeflow.org "a": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    unconditional = dict(fresh, metadata={"name": "a"})
    with pytest.raises(ApiException) as no_version:
        custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "a", unconditional)
    assert no_version.value.status == 422 and status_of(no_version)["message"] == (
        'pytorchjobs.kubeflow.org "a" is invalid: metadata.resourceVersion: Invalid value: 0: must be '
        "specified for an update"
    )


def test_status_subresource_isolation(custom: client.CustomObjectsApi, ns: str) -> None:
    create(custom, pytorchjob("a"), ns)
    condition = {"type": "Created", "status": "True"}
    after = custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        ns,
        PLURAL,
        "a",
        {
            "status": {"conditions": [condition]},
            "spec": {"runPolicy": {"backoffLimit": 5}},
            "metadata": {"labels": {"ignored": "yes"}},
        },
    )
    assert after["status"]["conditions"] == [condition] and "runPolicy" not in after["spec"]
    assert "labels" not in after["metadata"] or "ignored" not in after["metadata"]["labels"]
    main = custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        ns,
        PLURAL,
        "a",
        {"status": {"conditions": []}, "spec": {"runPolicy": {"backoffLimit": 2}}},
    )
    assert main["status"]["conditions"] == [condition] and main["spec"]["runPolicy"]["backoffLimit"] == 2
    assert main["metadata"]["generation"] == 2 and after["metadata"]["generation"] == 1


def owner_reference(owner: dict, **extra: bool) -> dict:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        **extra,
    }


def test_delete_collects_children_and_waits_for_finalizers(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, ns: str
) -> None:
    body = pytorchjob("a")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    ref = owner_reference(create(custom, body, ns), controller=True, blockOwnerDeletion=True)
    core.create_namespaced_pod(
        ns, {"metadata": {"name": "a-master-0", "ownerReferences": [ref]}, "spec": POD_SPEC}
    )
    core.create_namespaced_service(
        ns,
        {"metadata": {"name": "a-master-0", "ownerReferences": [ref]}, "spec": {"clusterIP": "None"}},
    )
    marked = custom.delete_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "a", propagation_policy="Foreground"
    )
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["finalizers"] == ["example.com/hold", "foregroundDeletion"]
    # the garbage collector deletes the children, then lifts foregroundDeletion
    wait_for(lambda: not core.list_namespaced_pod(ns).items and not core.list_namespaced_service(ns).items)

    def held() -> dict | None:
        job = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "a")
        return job if job["metadata"]["finalizers"] == ["example.com/hold"] else None

    assert wait_for(held)["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "a", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as gone:
        custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "a")
    assert gone.value.status == 404


def test_delete_background_collects_children_after_the_owner(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, ns: str
) -> None:
    ref = owner_reference(create(custom, pytorchjob("a"), ns))
    core.create_namespaced_config_map(ns, {"metadata": {"name": "child", "ownerReferences": [ref]}})
    answer = custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "a")
    assert answer["kind"] == "Status" and answer["status"] == "Success"
    assert answer["details"] == {"name": "a", "group": GROUP, "kind": PLURAL, "uid": ref["uid"]}
    wait_for(lambda: not core.list_namespaced_config_map(ns, field_selector="metadata.name=child").items)


def test_delete_orphan_keeps_children(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, ns: str
) -> None:
    ref = owner_reference(create(custom, pytorchjob("a"), ns))
    core.create_namespaced_config_map(ns, {"metadata": {"name": "kept", "ownerReferences": [ref]}})
    answer = custom.delete_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "a", propagation_policy="Orphan"
    )
    assert answer["kind"] == "PyTorchJob" and answer["metadata"]["finalizers"] == ["orphan"]
    # the garbage collector removes the reference, then the orphan finalizer, and the owner is gone
    wait_for(lambda: not names_of(custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)))
    assert core.read_namespaced_config_map("kept", ns).metadata.owner_references is None


def test_call_runs_on_the_cluster_loop(kube: LocalKube) -> None:
    async def on_loop(value: int) -> tuple[int, bool]:
        return value, asyncio.get_running_loop() is kube.loop

    assert kube.call(on_loop, 7) == (7, True)
    assert kube.call(threading.current_thread) is not threading.current_thread()
