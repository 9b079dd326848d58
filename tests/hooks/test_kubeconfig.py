"""The provider's own kubeconfig reading, over real HTTPS (``server``, see ``tls_server``): CA and client
certificates as data or files, token files, insecure-skip-tls-verify, in-cluster service accounts, exec
plugins, and what kubectl refuses. ``test_kubeconfig_conformance`` walks kubectl's cases one by one."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_training.hooks import kubeconfig as kubeconfig_module
from airflow_provider_training.hooks.connection import ConnectionConfigError
from airflow_provider_training.hooks.errors import KubeApiError, KubeConnectionError
from airflow_provider_training.hooks.training import AsyncTrainingJobHook, TrainingJobHook
from airflow_provider_training.hooks.transport import LineStream
from airflow_provider_training.kinds.registry import get_kind
from tests.hooks.kube_env import FAST_RETRY
from tests.hooks.tls_server import TlsServer, b64, make_pki

JOB = get_kind("PyTorchJob").resource


def kubeconfig(cluster: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ctx",
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
    }


async def get_absent(path: Path) -> None:
    """One GET through a hook on the kubeconfig at ``path``: the server's 404 means TLS and auth passed."""
    hook = AsyncTrainingJobHook(None, config_file=str(path), retry=FAST_RETRY)
    try:
        assert await hook.get_object(JOB, "absent", "default") is None
    finally:
        await hook.close()


def write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


async def test_inline_ca_and_client_certificate_data_authenticate(server, tmp_path):
    cert, key = server.pki.issue("alice", server=False)
    cluster = {"server": server.url, "certificate-authority-data": b64(server.pki.ca_pem)}
    user = {"client-certificate-data": b64(cert.read_bytes()), "client-key-data": b64(key.read_bytes())}
    await get_absent(write(tmp_path / "config", kubeconfig(cluster, user)))
    assert server.seen == [{"client": "alice", "authorization": ""}]


async def test_file_references_resolve_against_the_kubeconfig_folder(server, tmp_path):
    cert, key = server.pki.issue("bob", server=False)
    (tmp_path / "ca.crt").write_bytes(server.pki.ca_pem)
    cluster = {"server": server.url, "certificate-authority": "ca.crt"}
    user = {"client-certificate": cert.name, "client-key": key.name, "token": "tok"}
    await get_absent(write(tmp_path / "config", kubeconfig(cluster, user)))
    assert server.seen == [{"client": "bob", "authorization": "Bearer tok"}]


async def test_an_unknown_ca_is_refused_and_insecure_skip_tls_verify_accepts_it(server, tmp_path):
    other_ca = make_pki(tmp_path)
    cluster = {"server": server.url, "certificate-authority-data": b64(other_ca.ca_pem)}
    hook = AsyncTrainingJobHook(
        None, config_file=str(write(tmp_path / "bad", kubeconfig(cluster, {"token": "t"}))), retry=FAST_RETRY
    )
    try:
        with pytest.raises(Exception, match="certificate verify failed"):
            await hook.get_object(JOB, "absent", "default")
        with pytest.raises(KubeConnectionError, match="certificate verify failed"):
            await hook.open_log("default", "p", "c")  # a followed log, on its own connection
    finally:
        await hook.close()
    assert server.seen == []
    insecure = {"server": server.url, "insecure-skip-tls-verify": True}
    await get_absent(write(tmp_path / "insecure", kubeconfig(insecure, {"token": "t"})))
    assert server.seen == [{"client": None, "authorization": "Bearer t"}]


async def test_tls_server_name_verifies_another_name_than_the_url(server, tmp_path):
    cluster = {
        "server": server.url.replace("localhost", "127.0.0.1"),
        "certificate-authority-data": b64(server.pki.ca_pem),
        "tls-server-name": "kube.test",
    }
    await get_absent(write(tmp_path / "config", kubeconfig(cluster, {"token": "t"})))
    assert len(server.seen) == 1


async def test_a_rotated_token_file_is_read_again_after_a_401(server, tmp_path):
    token = tmp_path / "token"
    token.write_text("first\n")
    server.accepted_tokens = {"first"}
    cluster = {"server": server.url, "certificate-authority-data": b64(server.pki.ca_pem)}
    path = write(tmp_path / "config", kubeconfig(cluster, {"tokenFile": str(token)}))
    hook = AsyncTrainingJobHook(None, config_file=str(path), retry=FAST_RETRY)
    try:
        assert await hook.get_object(JOB, "absent", "default") is None
        token.write_text("second\n")  # the file rotates and the server stops accepting the old token
        server.accepted_tokens = {"second"}
        assert await hook.get_object(JOB, "absent", "default") is None
        token.write_text("third\n")  # and again, under a followed log (its own connection)
        server.accepted_tokens = {"third"}
        assert [line async for line in hook.follow_log("default", "p", "c")] == ["tls one", "tls two"]
    finally:
        await hook.close()
    sent = ["Bearer first", "Bearer first", "Bearer second", "Bearer second", "Bearer third"]
    assert [s["authorization"] for s in server.seen] == sent


async def follow(path: Path) -> tuple[list[str], type]:
    """A followed log through a hook on the kubeconfig at ``path``: its lines, and the stream's type."""
    hook = AsyncTrainingJobHook(None, config_file=str(path), retry=FAST_RETRY)
    try:
        stream = await hook.open_log("default", "p", "c", timestamps=False)
        stream.close()
        return [line async for line in hook.follow_log("default", "p", "c", timestamps=False)], type(stream)
    finally:
        await hook.close()


async def test_a_followed_log_over_tls_with_a_client_certificate_and_a_server_name(server, tmp_path):
    cert, key = server.pki.issue("carol", server=False)
    cluster = {
        "server": server.url.replace("localhost", "127.0.0.1"),
        "certificate-authority-data": b64(server.pki.ca_pem),
        "tls-server-name": "kube.test",
    }
    user = {"client-certificate-data": b64(cert.read_bytes()), "client-key-data": b64(key.read_bytes())}
    lines, kind = await follow(write(tmp_path / "config", kubeconfig(cluster, user)))
    assert lines == ["tls one", "tls two"]
    assert kind is LineStream
    assert server.seen == [{"client": "carol", "authorization": ""}] * 2


@pytest.fixture
def service_account(server, tmp_path, monkeypatch) -> Path:
    """A pod's service account (token, the server's CA, namespace ``team-pod``) and environment: the
    provider reads the files from ``kubeconfig.SERVICE_ACCOUNT``, pointed here."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("sa-token")
    (account / "ca.crt").write_bytes(server.pki.ca_pem)
    (account / "namespace").write_text("team-pod\n")
    monkeypatch.setattr(kubeconfig_module, "SERVICE_ACCOUNT", account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "localhost")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", server.url.rsplit(":", 1)[1])
    return account


async def test_in_cluster_service_account(server, service_account):
    hook = AsyncTrainingJobHook(None, connection_extras={"in_cluster": True}, retry=FAST_RETRY)
    try:
        assert await hook.get_object(JOB, "absent", "default") is None
    finally:
        await hook.close()
    assert server.seen == [{"client": None, "authorization": "Bearer sa-token"}]


@pytest.mark.parametrize(
    ("extras", "namespace"),
    [
        ({"in_cluster": True}, "team-pod"),
        ({}, "team-pod"),  # no configuration, in a pod: the service account
        ({"in_cluster": True, "namespace": "ml"}, "ml"),
        ({"kube_config_path": "/elsewhere/config"}, "default"),  # another cluster than the pod's
    ],
)
def test_on_the_service_account_jobs_go_to_the_pods_namespace(service_account, extras, namespace):
    """As KubernetesPodOperator: without a ``namespace`` extra, the service account's namespace file."""
    assert asyncio.run(AsyncTrainingJobHook(None, connection_extras=extras).get_namespace()) == namespace
    with TrainingJobHook(None, connection_extras=extras) as hook:  # what the operators ask
        assert hook.get_namespace() == namespace


def test_without_a_namespace_file_in_cluster_jobs_go_to_default(service_account):
    (service_account / "namespace").unlink()
    with TrainingJobHook(None, connection_extras={"in_cluster": True}) as hook:
        assert hook.get_namespace() == "default"


async def test_an_exec_plugin_user_gets_the_plugins_token(server, tmp_path):
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "from-exec"},
    }
    cluster = {"server": server.url, "certificate-authority-data": b64(server.pki.ca_pem)}
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
        }
    }
    await get_absent(write(tmp_path / "config", kubeconfig(cluster, user)))
    assert server.seen == [{"client": None, "authorization": "Bearer from-exec"}]


async def test_kubeconfig_problems_name_the_entry_and_reach_no_server(server, tmp_path):
    config = kubeconfig({"server": server.url}, {"token": "t"})
    config["contexts"][0]["context"]["cluster"] = "missing"
    hook = AsyncTrainingJobHook(None, config_file=str(write(tmp_path / "c", config)), retry=FAST_RETRY)
    try:
        with pytest.raises(ConnectionConfigError, match="no cluster named 'missing'"):
            await hook.get_object(JOB, "absent", "default")
        hook_b = AsyncTrainingJobHook(None, config_file=str(tmp_path / "nowhere"), retry=FAST_RETRY)
        with pytest.raises(ConnectionConfigError, match="cannot read the kubeconfig"):
            await hook_b.get_object(JOB, "absent", "default")
        await hook_b.close()
    finally:
        await hook.close()
    assert server.seen == []


def test_kube_api_error_keeps_the_client_exception_attributes():
    error = KubeApiError.from_response(403, b'{"reason": "Forbidden", "message": "no"}', {"X": "y"})
    assert (error.status, error.reason, error.message, error.headers["x"]) == (403, "Forbidden", "no", "y")
    assert json.loads(error.body or b"") == {"reason": "Forbidden", "message": "no"}


# -- what kubectl refuses: booleans that are not booleans, TLS settings that contradict each other -----------


def exec_user() -> dict[str, Any]:
    """An exec plugin user whose plugin prints a token."""
    credential = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential"}
    credential["status"] = {"token": "from-exec"}  # type: ignore[assignment]
    command = {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable}
    return {"exec": {**command, "args": ["-c", f"print({json.dumps(json.dumps(credential))})"]}}


async def refused(path: Path, server: TlsServer, *expected: str) -> None:
    """A hook on the kubeconfig at ``path`` refuses it with an error holding each of ``expected``, before
    any request reaches the server."""
    hook = AsyncTrainingJobHook(None, config_file=str(path), retry=FAST_RETRY)
    try:
        with pytest.raises(ConnectionConfigError) as caught:
            await hook.get_object(JOB, "absent", "default")
    finally:
        await hook.close()
    for text in expected:
        assert text in str(caught.value)
    assert server.seen == []


@pytest.mark.parametrize("user", [{"token": "t"}, exec_user()], ids=["static", "exec"])
@pytest.mark.parametrize("value", ['"false"', '"no"', "1"])
async def test_insecure_skip_tls_verify_that_is_not_a_boolean_is_refused(server, tmp_path, value, user):
    """``"false"`` is a string, true in Python: read as a flag it turned verification off, and the server's
    certificate (from a CA the client does not know) was accepted. kubectl refuses the file."""
    config = kubeconfig({"server": server.url, "insecure-skip-tls-verify": "FLAG"}, user)
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config).replace("FLAG", value))  # the value as written, quotes and all
    await refused(path, server, str(path), "cluster 'c'", "insecure-skip-tls-verify must be a boolean")


@pytest.mark.parametrize("user", [{"token": "t"}, exec_user()], ids=["static", "exec"])
@pytest.mark.parametrize(("value", "verified"), [("n", True), ("y", False), ("no", True), ("on", False)])
async def test_yaml_booleans_unquoted_are_read_as_kubectl_reads_them(server, tmp_path, value, verified, user):
    """YAML 1.1 booleans, ``y``/``n`` included (PyYAML leaves those two strings; kubectl reads booleans;
    the client's plugin loader took the string ``n`` for true)."""
    config = kubeconfig({"server": server.url, "insecure-skip-tls-verify": "FLAG"}, user)
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config).replace("FLAG", value))
    if verified:  # the server's CA is unknown to the client: verification fails
        hook = AsyncTrainingJobHook(None, config_file=str(path), retry=FAST_RETRY)
        try:
            with pytest.raises(KubeConnectionError, match="certificate verify failed"):
                await hook.get_object(JOB, "absent", "default")
        finally:
            await hook.close()
        assert server.seen == []
    else:
        await get_absent(path)
        assert len(server.seen) == 1


@pytest.mark.parametrize(
    ("cluster_field", "user_field", "named"),
    [
        ("disable-compression", None, "disable-compression"),
        (None, "provideClusterInfo", "exec.provideClusterInfo"),
    ],
)
async def test_other_boolean_fields_must_be_booleans_too(server, tmp_path, cluster_field, user_field, named):
    cluster = {"server": server.url, "certificate-authority-data": b64(server.pki.ca_pem)}
    user = exec_user()
    if cluster_field:
        cluster[cluster_field] = "false"
    if user_field:
        user["exec"][user_field] = "true"
    path = write(tmp_path / "config", kubeconfig(cluster, user))
    where = "cluster 'c'" if cluster_field else "user 'u'"
    await refused(path, server, str(path), where, f"{named} must be a boolean", "not the string")


async def test_the_error_names_the_file_the_entry_came_from(server, tmp_path, monkeypatch):
    """With ``KUBECONFIG`` listing two files, the file named is the one that defines the cluster."""
    first = write(tmp_path / "first", {**kubeconfig({"server": server.url}, {"token": "t"}), "clusters": []})
    cluster = {"server": server.url, "insecure-skip-tls-verify": "false"}
    second = write(tmp_path / "second", {**kubeconfig(cluster, {"token": "t"}), "current-context": ""})
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    hook = AsyncTrainingJobHook(None, retry=FAST_RETRY)
    try:
        with pytest.raises(ConnectionConfigError, match=f"the kubeconfig {second}: cluster 'c': insecure"):
            await hook.get_object(JOB, "absent", "default")
    finally:
        await hook.close()
    assert server.seen == []


async def test_a_kube_config_extra_is_checked_as_a_file_is(server):
    config = kubeconfig({"server": server.url, "insecure-skip-tls-verify": "false"}, {"token": "t"})
    hook = AsyncTrainingJobHook(None, connection_extras={"kube_config": config}, retry=FAST_RETRY)
    try:
        with pytest.raises(
            ConnectionConfigError, match="the connection's kube_config: cluster 'c': insecure-skip-tls-verify"
        ):
            await hook.get_object(JOB, "absent", "default")
    finally:
        await hook.close()
    assert server.seen == []


@pytest.mark.parametrize("user", [{"token": "t"}, exec_user()], ids=["static", "exec"])
@pytest.mark.parametrize("ca_field", ["certificate-authority", "certificate-authority-data"])
async def test_insecure_skip_tls_verify_with_a_ca_is_refused(server, tmp_path, ca_field, user):
    """kubectl: "specifying a root certificates file with the insecure flag is not allowed"; the clients
    let insecure win."""
    (tmp_path / "ca.crt").write_bytes(server.pki.ca_pem)
    ca = "ca.crt" if ca_field == "certificate-authority" else b64(server.pki.ca_pem)
    cluster = {"server": server.url, "insecure-skip-tls-verify": True, ca_field: ca}
    path = write(tmp_path / "config", kubeconfig(cluster, user))
    message = "specifying a root certificates file with the insecure flag is not allowed"
    await refused(path, server, str(path), "cluster 'c'", ca_field, "insecure-skip-tls-verify", message)


async def test_a_ca_file_and_ca_data_together_are_refused(server, tmp_path):
    (tmp_path / "ca.crt").write_bytes(server.pki.ca_pem)
    cluster = {
        "server": server.url,
        "certificate-authority": "ca.crt",
        "certificate-authority-data": b64(server.pki.ca_pem),
    }
    path = write(tmp_path / "config", kubeconfig(cluster, {"token": "t"}))
    expected = "certificate-authority and certificate-authority-data are both set"
    await refused(path, server, str(path), "cluster 'c'", expected)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (("client-certificate",), "client-certificate is set without client-key or client-key-data"),
        (
            ("client-certificate-data",),
            "client-certificate-data is set without client-key or client-key-data",
        ),
        (
            ("client-certificate", "client-certificate-data", "client-key"),
            "client-certificate and client-certificate-data are both set",
        ),
        (
            ("client-certificate", "client-key", "client-key-data"),
            "client-key and client-key-data are both set",
        ),
    ],
)
async def test_a_client_certificate_needs_one_key(server, tmp_path, given, expected):
    cert, key = server.pki.issue("dave", server=False)
    values = {
        "client-certificate": str(cert),
        "client-certificate-data": b64(cert.read_bytes()),
        "client-key": str(key),
        "client-key-data": b64(key.read_bytes()),
    }
    cluster = {"server": server.url, "certificate-authority-data": b64(server.pki.ca_pem)}
    path = write(tmp_path / "config", kubeconfig(cluster, {name: values[name] for name in given}))
    await refused(path, server, str(path), "user 'u'", expected)
