"""The provider's own kubeconfig reading, over real HTTPS: CA and client certificates as data or files, token
files, insecure-skip-tls-verify, in-cluster service accounts, and exec plugins handed to kubernetes_asyncio.

The server is a small aiohttp app with a certificate signed by a CA made here; it answers the one GET the
tests make and records the credentials each request brought (the TLS client certificate's subject and the
Authorization header)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from airflow_provider_training.hooks import kubeconfig as kubeconfig_module
from airflow_provider_training.hooks.connection import ConnectionConfigError
from airflow_provider_training.hooks.errors import KubeApiError, KubeConnectionError
from airflow_provider_training.hooks.training import AsyncTrainingJobHook, TrainingJobHook
from airflow_provider_training.hooks.transport import LineStream
from airflow_provider_training.kinds.registry import get_kind
from tests.hooks.kube_env import FAST_RETRY

JOB = get_kind("PyTorchJob").resource
LOG_CHUNKS = [b"tls one\ntls ", b"two\n"]


@dataclass
class Pki:
    folder: Path
    ca_pem: bytes
    ca_key: ec.EllipticCurvePrivateKey

    def issue(self, name: str, *, server: bool) -> tuple[Path, Path]:
        """A certificate for ``name`` signed by the CA: (certificate file, key file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        ca = x509.load_pem_x509_certificate(self.ca_pem)
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName("kube.test"), x509.DNSName("localhost")]),
                critical=False,
            )
        cert = builder.sign(self.ca_key, hashes.SHA256())
        cert_file, key_file = self.folder / f"{name}.crt", self.folder / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_file, key_file


def make_pki(folder: Path) -> Pki:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Pki(folder, cert.public_bytes(serialization.Encoding.PEM), key)


@dataclass
class TlsServer:
    url: str
    pki: Pki
    seen: list[dict[str, Any]] = field(default_factory=list)
    accepted_tokens: set[str] = field(default_factory=set)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[TlsServer]:
    """HTTPS on 127.0.0.1 with the name kube.test in its certificate; client certificates are optional."""
    pki = make_pki(tmp_path)
    cert_file, key_file = pki.issue("apiserver", server=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=pki.ca_pem.decode())
    context.load_cert_chain(cert_file, key_file)
    context.verify_mode = ssl.CERT_OPTIONAL
    state = TlsServer("", pki)

    async def handle(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item[0] for item in peer["subject"]) if peer else {}
        authorization = request.headers.get("Authorization", "")
        state.seen.append({"client": subject.get("commonName"), "authorization": authorization})
        bearer = authorization.removeprefix("Bearer ")
        if state.accepted_tokens and bearer not in state.accepted_tokens:
            status = {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"}
            return web.json_response(status, status=401)
        if request.path.endswith("/log"):  # a pod's log: two lines in two chunks, then its end
            response = web.StreamResponse(headers={"Content-Type": "text/plain"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            for piece in LOG_CHUNKS:
                await response.write(piece)
            await response.write_eof()
            return response
        # As kube-apiserver answers for a missing object of a served resource: the Status names it.
        name = request.path.rsplit("/", 1)[-1]
        status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"}
        return web.json_response({**status, "details": {"name": name}}, status=404)

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"https://localhost:{port}"
    try:
        yield state
    finally:
        await runner.cleanup()


def kubeconfig(cluster: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ctx",
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
    }


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


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


async def test_an_exec_plugin_user_goes_through_the_client_loader(server, tmp_path):
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
    """An exec plugin user (handed to kubernetes_asyncio's loader) whose plugin prints a token."""
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
