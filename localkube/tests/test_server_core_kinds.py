"""Secrets, service accounts, namespaces and RBAC roles through the real client, and no secret in any log."""

from __future__ import annotations

import base64
import json
import logging
import urllib.request

import pytest
from conftest import Server
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from localkube.cluster import LocalKube

from localkube import defaults
from tests.operators.harness import wait_for

VALUE = "hunter2-do-not-log"
ENCODED = base64.b64encode(VALUE.encode()).decode()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_discovery_lists_the_core_kinds_and_rbac(api_client: client.ApiClient) -> None:
    core = {r.name: r for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"secrets", "serviceaccounts", "namespaces", "namespaces/status"} <= set(core)
    assert not core["namespaces"].namespaced and core["secrets"].namespaced
    assert core["serviceaccounts"].short_names == ["sa"] and core["namespaces"].short_names == ["ns"]
    groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
    assert "rbac.authorization.k8s.io" in groups
    rbac = client.RbacAuthorizationV1Api(api_client).get_api_resources()
    assert {(r.name, r.kind, r.namespaced) for r in rbac.resources} >= {
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    }


def test_secret_string_data_is_written_into_data(core: client.CoreV1Api, ns: str) -> None:
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name="creds"), data={"user": b64("alice")}, string_data={"token": VALUE}
    )
    created = core.create_namespaced_secret(ns, body)
    assert created.type == "Opaque" and created.string_data is None
    assert created.data == {"user": b64("alice"), "token": ENCODED}

    patched = core.patch_namespaced_secret("creds", ns, {"stringData": {"user": "bob"}})
    assert patched.data == {"user": b64("bob"), "token": ENCODED} and patched.string_data is None
    read = core.read_namespaced_secret("creds", ns)
    assert read.data == patched.data
    keys = {"tls.crt": b64("certificate"), "tls.key": b64("key")}
    tls = client.V1Secret(metadata=client.V1ObjectMeta(name="tls"), type="kubernetes.io/tls", data=keys)
    core.create_namespaced_secret(ns, tls)
    assert [s.metadata.name for s in core.list_namespaced_secret(ns, field_selector="type=Opaque").items] == [
        "creds"
    ]


def test_a_secret_of_a_type_needs_its_keys(core: client.CoreV1Api, ns: str) -> None:
    tls = client.V1Secret(
        metadata=client.V1ObjectMeta(name="tls"), type="kubernetes.io/tls", string_data={"tls.crt": VALUE}
    )
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_secret(ns, tls)
    assert json.loads(refused.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Secret "tls" is invalid: data[tls.key]: Required value',
        "reason": "Invalid",
        "details": {
            "name": "tls",
            "kind": "Secret",
            "causes": [
                {"reason": "FieldValueRequired", "message": "Required value", "field": "data[tls.key]"}
            ],
        },
        "code": 422,
    }


def test_secret_data_must_be_base64(core: client.CoreV1Api, ns: str) -> None:
    body = client.V1Secret(metadata=client.V1ObjectMeta(name="bad"), data={"token": VALUE + "!"})
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_secret(ns, body)
    assert exc.value.status == 400
    message = json.loads(exc.value.body)["message"]
    assert message.startswith('Secret in version "v1" cannot be handled as a Secret') and VALUE not in message


def test_no_secret_value_in_localkube_logs_or_request_records(
    kube: LocalKube, core: client.CoreV1Api, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    body = client.V1Secret(metadata=client.V1ObjectMeta(name="creds"), string_data={"token": VALUE})
    core.create_namespaced_secret("default", body)
    core.read_namespaced_secret("creds", "default")
    core.patch_namespaced_secret("creds", "default", {"stringData": {"again": VALUE}})
    core.list_secret_for_all_namespaces()
    with pytest.raises(ApiException):
        core.create_namespaced_secret(
            "default", client.V1Secret(metadata=client.V1ObjectMeta(name="bad"), data={"k": VALUE})
        )

    def broken(obj: dict, creating: bool) -> None:  # a bug whose message quotes the value
        raise RuntimeError(f"cannot store {obj['stringData']}")

    monkeypatch.setitem(defaults._WRITERS, "secrets", broken)
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_secret("default", body)
    assert exc.value.status == 500 and VALUE not in exc.value.body

    # the client's own debug log prints response bodies; what localkube (and aiohttp under it) logs must not
    ours = "\n".join(
        caplog.handler.format(record)
        for record in caplog.records
        if record.name.startswith(("localkube", "aiohttp"))
    )
    assert "POST /api/v1/namespaces/default/secrets failed: RuntimeError" in ours
    assert VALUE not in ours and ENCODED not in ours
    assert VALUE not in repr(kube.requests) and ENCODED not in repr(kube.requests)
    admin = urllib.request.Request(
        f"{kube.url}/localkube/requests", headers={"Authorization": f"Bearer {kube.token}"}
    )
    with urllib.request.urlopen(admin) as response:
        recorded = response.read().decode()
    assert "/secrets" in recorded and VALUE not in recorded and ENCODED not in recorded


SYSTEM = ["default", "kube-node-lease", "kube-public", "kube-system"]  # what a new cluster has


def namespace_names(core: client.CoreV1Api, *mine: str, **kwargs: str) -> list[str]:
    """The system namespaces and ``mine`` that exist (the real cluster also has other tests')."""
    return [
        n.metadata.name
        for n in core.list_namespace(**kwargs).items
        if n.metadata.name in SYSTEM or n.metadata.name in mine
    ]


def test_namespaces_are_cluster_scoped_and_the_system_ones_exist(
    server: Server, core: client.CoreV1Api
) -> None:
    assert core.read_namespace("default").status.phase == "Active"
    team = f"{server.namespace}-team" if server.real else "team"
    created = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=team)))
    assert created.metadata.labels == {"kubernetes.io/metadata.name": team}
    assert (created.spec.finalizers, created.status.phase) == (["kubernetes"], "Active")
    assert created.metadata.namespace is None
    assert namespace_names(core, team, field_selector="status.phase=Active") == [*SYSTEM, team]
    assert core.read_namespace_status(team).status.phase == "Active"

    stream = watch.Watch()
    seen = []
    selector = f"kubernetes.io/metadata.name in ({','.join([*SYSTEM, team])})"
    for event in stream.stream(core.list_namespace, label_selector=selector, timeout_seconds=10):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 5:
            stream.stop()
    assert seen == [("ADDED", name) for name in [*SYSTEM, team]]
    core.delete_namespace(team)


def test_deleting_a_namespace_deletes_what_is_in_it(server: Server, core: client.CoreV1Api, ns: str) -> None:
    """kube-apiserver marks the namespace Terminating and answers; kube-controller-manager's namespace
    controller deletes what is in it, then the namespace. localkube does all of it at once."""
    team = server.create_namespace("team")
    core.create_namespaced_secret(team, client.V1Secret(metadata=client.V1ObjectMeta(name="s")))
    core.create_namespaced_config_map(team, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))
    core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))
    answer = json.loads(core.delete_namespace(team, _preload_content=False).data)
    assert answer["kind"] == "Namespace" and answer["status"]["phase"] == "Terminating"
    wait_for(lambda: team not in namespace_names(core, team))
    assert core.list_namespaced_secret(team).items == [] and core.list_namespaced_config_map(team).items == []
    assert [
        c.metadata.name for c in core.list_namespaced_config_map(ns, field_selector="metadata.name=c").items
    ] == ["c"]


def test_an_object_in_a_namespace_that_does_not_exist_is_not_found_as_on_a_real_server(
    server: Server, core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    """kubernetes-real-apiserver.md: a create in a missing namespace is 404 NotFound on kube-apiserver."""
    nowhere = f"{server.namespace}-nowhere" if server.real else "nowhere"
    account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="sa"))
    with pytest.raises(ApiException) as missing:
        core.create_namespaced_service_account(nowhere, account)
    assert missing.value.status == 404
    assert json.loads(missing.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'namespaces "{nowhere}" not found',
        "reason": "NotFound",
        "details": {"name": nowhere, "kind": "namespaces"},
        "code": 404,
    }
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}},
    }
    with pytest.raises(ApiException) as custom_missing:
        custom.create_namespaced_custom_object("kubeflow.org", "v1", nowhere, "pytorchjobs", job)
    assert json.loads(custom_missing.value.body)["message"] == f'namespaces "{nowhere}" not found'
    assert namespace_names(core, nowhere) == SYSTEM  # nothing made on the way

    server.create_namespace("nowhere")
    wait_for(lambda: core.list_namespaced_service_account(nowhere).items)  # `default`, on a real server
    core.create_namespaced_service_account(nowhere, account)
    assert "sa" in [sa.metadata.name for sa in core.list_namespaced_service_account(nowhere).items]


def test_the_system_namespaces_may_not_be_deleted(core: client.CoreV1Api) -> None:
    for name in ("default", "kube-system", "kube-public"):
        with pytest.raises(ApiException) as refused:
            core.delete_namespace(name)
        body = json.loads(refused.value.body)
        assert (refused.value.status, body["reason"]) == (403, "Forbidden")
        assert body["message"] == f'namespaces "{name}" is forbidden: this namespace may not be deleted'


def test_the_node_lease_namespace_may_be_deleted(kube: LocalKube, core: client.CoreV1Api) -> None:
    """Not immortal on a real server either (not tried there: the session's cluster needs it)."""
    core.delete_namespace("kube-node-lease")
    assert [ns.metadata.name for ns in core.list_namespace().items] == SYSTEM[:1] + SYSTEM[2:]


def test_namespaces_are_deleted_one_at_a_time(api_client: client.ApiClient) -> None:
    """No deletecollection (the clients have no method for it either)."""
    with pytest.raises(ApiException) as refused:
        api_client.call_api(
            "/api/v1/namespaces",
            "DELETE",
            query_params=[("labelSelector", "nothing=here")],
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
    assert (refused.value.status, json.loads(refused.value.body)["reason"]) == (405, "MethodNotAllowed")


def test_wrong_scope_paths_are_not_found(api_client: client.ApiClient) -> None:
    for path in ("/api/v1/namespaces/default/namespaces/team", "/api/v1/secrets/creds"):
        with pytest.raises(ApiException) as exc:
            api_client.call_api(path, "GET", auth_settings=["BearerToken"], _preload_content=False)
        assert exc.value.status == 404, path


def test_service_accounts_roles_and_bindings(
    core: client.CoreV1Api, api_client: client.ApiClient, ns: str
) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    account = core.create_namespaced_service_account(
        ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="trainer"))
    )
    assert account.metadata.uid and account.kind == "ServiceAccount"
    rule = client.V1PolicyRule(api_groups=["kubeflow.org"], resources=["pytorchjobs"], verbs=["get", "watch"])
    role = rbac.create_namespaced_role(
        ns, client.V1Role(metadata=client.V1ObjectMeta(name="reader"), rules=[rule])
    )
    assert role.rules[0].resources == ["pytorchjobs"]
    binding = client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="trainer-reads"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="reader"),
        subjects=[
            client.RbacV1Subject(kind="ServiceAccount", name="trainer", namespace=ns),
            client.RbacV1Subject(kind="User", name="alice"),
        ],
    )
    created = rbac.create_namespaced_role_binding(ns, binding)
    assert [(s.kind, s.api_group) for s in created.subjects] == [
        ("ServiceAccount", None),
        ("User", "rbac.authorization.k8s.io"),
    ]
    assert [b.role_ref.name for b in rbac.list_namespaced_role_binding(ns).items] == ["reader"]
    rbac.delete_namespaced_role("reader", ns)
    assert rbac.list_namespaced_role(ns).items == []
