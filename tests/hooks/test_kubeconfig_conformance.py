"""Conformance with kubectl: a corpus of kubeconfigs, each read by the provider and used for one request to a
real HTTPS server made here (see ``server`` in ``test_kubeconfig``), each with what kubectl (client-go
v0.37.2, /work/shared/reference/kubeconfig-semantics.md) does with it written beside it.

``CORPUS`` holds the cases that differ only in their cluster and user entries: its YAML is written as a user
would write it (``$url``, ``$ca`` and ``$dir`` filled in), next to the files it names (``ca.crt``,
``alice.crt``/``.key``, ``tok``, ``bin/plugin``). The cases that need more (several files, a proxy, a
plugin's output that changes, an issuer) are functions below it. Outcomes: ``Sent`` (the request reached the
server with these credentials) or ``Refused`` (an error holding each of these texts, the kubeconfig's path
always among them, and no request sent)."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from string import Template
from typing import Any

import httpx
import pytest

from airflow_provider_training.hooks.connection import (
    ConnectionConfigError,
    KubeSettings,
    build_configuration,
)
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from tests.hooks.kube_env import FAST_RETRY
from tests.hooks.test_kubeconfig import JOB
from tests.hooks.tls_server import TlsServer, b64, make_pki

V1, V1BETA1 = "client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"
ALICE_CERT = "client-certificate: alice.crt\nclient-key: alice.key"
CA_CLUSTER = "server: $url\ncertificate-authority: ca.crt"
PLUGIN = f"""#!{sys.executable}
import json, os, pathlib, sys
here = pathlib.Path(__file__).parent
run = {{"args": sys.argv[1:], "greeting": os.environ.get("GREETING"), "stdin": sys.stdin.read(),
        "info": json.loads(os.environ["KUBERNETES_EXEC_INFO"])}}
with open(here / "runs.jsonl", "a") as runs:
    runs.write(json.dumps(run) + "\\n")
sys.stderr.write(os.environ.get("SAY", ""))
sys.stdout.write((here / "output").read_text())
sys.exit(int(os.environ.get("EXIT", "0")))
"""


@dataclass(frozen=True)
class Sent:
    authorization: str = ""
    client: str | None = None  # the client certificate's common name


@dataclass(frozen=True)
class Refused:
    texts: tuple[str, ...]

    def __init__(self, *texts: str) -> None:
        object.__setattr__(self, "texts", texts)


@dataclass(frozen=True)
class Case:
    id: str
    kubectl: str
    user: str
    expected: Sent | Refused
    cluster: str = CA_CLUSTER
    output: dict[str, Any] | None = None  # what bin/plugin prints


def credential(version: str = V1, **status: Any) -> dict[str, Any]:
    return {"apiVersion": version, "kind": "ExecCredential", "status": status}


def plugin(version: str, *more: str) -> str:
    return "\n".join(("exec:", f"  apiVersion: {version}", "  command: ./bin/plugin", *more))


CORPUS = [
    Case("token", "kubectl: 200 with Bearer abc", "token: abc", Sent("Bearer abc")),
    Case(
        "tokenFile",
        "kubectl: 200 with Bearer tok (the file's newline trimmed)",
        "tokenFile: tok",
        Sent("Bearer tok"),
    ),
    Case(
        "token+tokenFile",
        "kubectl: 200 with Bearer tok (the file wins)",
        "token: inline\ntokenFile: tok",
        Sent("Bearer tok"),
    ),
    Case(
        "cert files",
        "kubectl: 200 as alice (paths relative to the kubeconfig)",
        ALICE_CERT,
        Sent("", "alice"),
    ),
    Case(
        "cert data",
        "kubectl: 200 as alice",
        "client-certificate-data: $cert64\nclient-key-data: $key64",
        Sent("", "alice"),
    ),
    Case(
        "cert+token",
        "kubectl: 200 as alice with Bearer abc (both)",
        ALICE_CERT + "\ntoken: abc",
        Sent("Bearer abc", "alice"),
    ),
    Case(
        "basic",
        "kubectl: 200 with Basic base64(ann:pw)",
        "username: ann\npassword: pw",
        Sent("Basic YW5uOnB3"),
    ),
    Case("no user", "kubectl (library): 200 with no credentials", "{}", Sent("")),
    Case(
        "insecure",
        "kubectl: 200 (no verification)",
        "token: abc",
        Sent("Bearer abc"),
        "server: $url\ninsecure-skip-tls-verify: true",
    ),
    Case(
        "line-wrapped CA data (c)",
        "kubectl: 200 (Go's base64 decoder drops the line breaks of a literal block)",
        "token: abc",
        Sent("Bearer abc"),
        "server: $url\ncertificate-authority-data: |\n$ca_wrapped",
    ),
    Case(
        "folded CA data",
        "kubectl: error: illegal base64 data at input byte 76 (a plain scalar folds lines into spaces)",
        "token: abc",
        Refused("cluster 'c'", "certificate-authority-data is not base64"),
        "server: $url\ncertificate-authority-data:\n$ca_wrapped",
    ),
    Case(
        "missing CA file (g)",
        "kubectl: error: unable to read certificate-authority $dir/none.crt for c: no such file or directory",
        "token: abc",
        Refused("cluster 'c'", "certificate-authority", "$dir/none.crt", "No such file"),
        "server: $url\ncertificate-authority: none.crt",
    ),
    Case(
        "missing client certificate file (g)",
        "kubectl: error: unable to read client-cert $dir/none.crt for u due to open ...: no such file",
        "client-certificate: none.crt\nclient-key: alice.key",
        Refused("user 'u'", "client-certificate", "$dir/none.crt", "No such file"),
    ),
    Case(
        "missing tokenFile",
        "kubectl: error: open $dir/none: no such file or directory",
        "tokenFile: none",
        Refused("user 'u'", "tokenFile", "$dir/none"),
    ),
    Case(
        "quoted boolean",
        "kubectl: error: cannot unmarshal string into ... insecure-skip-tls-verify of type bool",
        "token: abc",
        Refused("cluster 'c'", "insecure-skip-tls-verify must be a boolean"),
        "server: $url\ninsecure-skip-tls-verify: 'false'",
    ),
    Case(
        "token+basic",
        "kubectl: error: more than one authentication method found for u; found [token basicAuth]",
        "token: abc\nusername: ann\npassword: pw",
        Refused("user 'u'", "token (or tokenFile) and username are both set"),
    ),
    Case(
        "tls-server-name",
        "kubectl: 200 (127.0.0.1 is not in the certificate; kube.test, the name verified, is)",
        "token: abc",
        Sent("Bearer abc"),
        "server: $url_ip\ncertificate-authority: ca.crt\ntls-server-name: kube.test",
    ),
    Case(
        "IPv6",
        "kubectl: 200 from https://[::1]:port",
        "token: abc",
        Sent("Bearer abc"),
        "server: $url6\ncertificate-authority: ca.crt",
    ),
    Case(
        "proxy-url scheme",
        "kubectl: error: invalid 'proxy-url' ... scheme socks4 (only http, https, socks5)",
        "token: abc",
        Refused("cluster 'c'", "proxy-url must be an http://, https:// or socks5:// URL"),
        "server: $url\ncertificate-authority: ca.crt\nproxy-url: socks4://127.0.0.1:1",
    ),
    Case(
        "exec v1 token, env, args, interactiveMode Never",
        "kubectl: 200 with Bearer from-plugin (env and args reach the plugin; no stdin)",
        plugin(V1, "  args: [x]", "  env: [{name: GREETING, value: hello}]", "  interactiveMode: Never"),
        Sent("Bearer from-plugin"),
        output=credential(token="from-plugin"),
    ),
    Case(
        "exec v1beta1 token (relative command, f)",
        "kubectl: 200 with Bearer beta; ./bin/plugin is run from the kubeconfig's folder",
        plugin(V1BETA1),
        Sent("Bearer beta"),
        output=credential(V1BETA1, token="beta"),
    ),
    Case(
        "exec client certificate",
        "kubectl: 200 as alice",
        plugin(V1, "  interactiveMode: Never"),
        Sent("", "alice"),
        output=credential(clientCertificateData="$cert", clientKeyData="$key"),
    ),
    Case(
        "exec with a static token",
        "kubectl: 200 with Bearer abc; the plugin is never run",
        "token: abc\n" + plugin(V1, "  interactiveMode: Never"),
        Sent("Bearer abc"),
        output={"not": "run"},
    ),
    Case(
        "exec v1 without interactiveMode",
        "kubectl: error: interactiveMode must be specified for u to use exec authentication plugin",
        plugin(V1),
        Refused("user 'u'", "exec.interactiveMode"),
    ),
    Case(
        "exec v1alpha1",
        'kubectl: error: exec plugin: invalid apiVersion "client.authentication.k8s.io/v1alpha1"',
        plugin("client.authentication.k8s.io/v1alpha1"),
        Refused("user 'u'", "exec.apiVersion"),
    ),
    Case(
        "exec command not found",
        "kubectl: error: getting credentials: exec: executable $dir/bin/none not found",
        "exec: {apiVersion: " + V1BETA1 + ", command: ./bin/none}",
        Refused("user 'u'", "exec.command", "$dir/bin/none not found"),
    ),
    Case(
        "exec exit code",
        "kubectl: error: getting credentials: exec: executable $dir/bin/plugin failed with exit code 3",
        plugin(V1BETA1, "  env: [{name: EXIT, value: '3'}, {name: SAY, value: no such account}]"),
        Refused("user 'u'", "exec.command", "failed with exit code 3", "no such account"),
        output=credential(V1BETA1, token="unused"),
    ),
    Case(
        "exec bad output",
        "kubectl: error: getting credentials: decoding stdout: couldn't get version/kind",
        plugin(V1BETA1),
        Refused("user 'u'", "exec (the plugin's output)", "not an ExecCredential"),
        output=None,
    ),
    Case(
        "exec other apiVersion",
        "kubectl: error: exec plugin is configured to use API version v1beta1, plugin returned version v1",
        plugin(V1BETA1),
        Refused("user 'u'", "plugin returned version " + V1),
        output=credential(V1, token="t"),
    ),
    Case(
        "exec returns a certificate without its key",
        "kubectl: error: exec plugin returned only certificate or key, not both",
        plugin(V1BETA1),
        Refused("user 'u'", "only a certificate or a key"),
        output=credential(V1BETA1, clientCertificateData="$cert"),
    ),
    Case(
        "oidc id-token",
        "kubectl: 200 with Bearer <id-token> (not expired)",
        "auth-provider: {name: oidc, config: {idp-issuer-url: $url/idp, client-id: kube, id-token: $jwt}}",
        Sent("Bearer $jwt"),
    ),
    Case(
        "oidc without client-id",
        "kubectl: error: oidc: client-id field is required",
        "auth-provider: {name: oidc, config: {idp-issuer-url: $url/idp, id-token: $jwt}}",
        Refused("user 'u'", "auth-provider.config.client-id"),
    ),
    Case(
        "gcp auth-provider",
        'kubectl: error: The gcp auth plugin has been removed (no Auth Provider found for name "gcp")',
        "auth-provider: {name: gcp}",
        Refused("user 'u'", "auth-provider.name 'gcp'"),
    ),
]


def jwt(subject: str, expires: datetime) -> str:
    """An (unsigned) id-token: client-go reads only its ``exp``."""
    part = [{"alg": "none"}, {"sub": subject, "exp": int(expires.timestamp())}]
    return (
        ".".join(base64.urlsafe_b64encode(json.dumps(p).encode()).decode().rstrip("=") for p in part) + ".x"
    )


def kubeconfig_text(cluster: str, user: str, current: str = "current-context: ctx") -> str:
    return textwrap.dedent(
        """\
        apiVersion: v1
        kind: Config
        {current}
        contexts:
        - {{name: ctx, context: {{cluster: c, user: u}}}}
        clusters:
        - name: c
          cluster:
        {cluster}
        users:
        - name: u
          user:
        {user}
        """
    ).format(current=current, cluster=textwrap.indent(cluster, "    "), user=textwrap.indent(user, "    "))


@dataclass
class Folder:
    """A kubeconfig's folder: the CA, alice's certificate, a token file and the plugin, and the values the
    corpus's ``$names`` stand for."""

    path: Path
    values: dict[str, str]

    def fill(self, text: str) -> str:
        return Template(text).substitute(self.values)

    def write(self, name: str, cluster: str, user: str, **more: str) -> Path:
        path = self.path / name
        path.write_text(kubeconfig_text(self.fill(cluster), self.fill(user), **more))
        return path

    def plugin_prints(self, output: Any) -> None:
        text = "not an ExecCredential: [" if output is None else json.dumps(output)
        escaped = {name: json.dumps(value)[1:-1] for name, value in self.values.items()}
        (self.path / "bin" / "output").write_text(Template(text).substitute(escaped))

    def runs(self) -> list[dict[str, Any]]:
        runs = self.path / "bin" / "runs.jsonl"
        return [json.loads(line) for line in runs.read_text().splitlines()] if runs.exists() else []


def folder(path: Path, server: TlsServer) -> Folder:
    path.mkdir(parents=True, exist_ok=True)
    (path / "ca.crt").write_bytes(server.pki.ca_pem)
    cert, key = server.pki.issue("alice", server=False)
    (path / "alice.crt").write_bytes(cert.read_bytes())
    (path / "alice.key").write_bytes(key.read_bytes())
    (path / "tok").write_text("tok\n")
    (path / "bin").mkdir(exist_ok=True)
    (path / "bin" / "plugin").write_text(PLUGIN)
    (path / "bin" / "plugin").chmod(0o755)
    ca64 = b64(server.pki.ca_pem)
    values = {
        "url": server.url,
        "url_ip": server.url.replace("localhost", "127.0.0.1"),
        "url6": server.url6,
        "dir": str(path),
        "ca_wrapped": textwrap.indent("\n".join(textwrap.wrap(ca64, 76)), "  "),
        "cert": cert.read_text(),
        "key": key.read_text(),
        "cert64": b64(cert.read_bytes()),
        "key64": b64(key.read_bytes()),
        "jwt": jwt("ann", datetime.now(UTC) + timedelta(hours=1)),
    }
    return Folder(path, values)


async def outcome(**hook_args: Any) -> Sent | Exception:
    """One GET through a hook (a 404 from the server means TLS and authentication passed), or its error."""
    hook = AsyncTrainingJobHook(None, retry=FAST_RETRY, **hook_args)
    try:
        assert await hook.get_object(JOB, "absent", "default") is None
    except Exception as err:  # the outcome under test
        return err
    finally:
        await hook.close()
    return Sent()


def check(
    result: Sent | Exception, expected: Sent | Refused, server: TlsServer, files: Folder, path: Path
) -> None:
    if isinstance(expected, Refused):
        assert isinstance(result, Exception), result
        for text in (str(path), *map(files.fill, expected.texts)):
            assert text in str(result)
        assert server.seen == []
    else:
        assert not isinstance(result, Exception), result
        assert server.seen == [
            {"client": expected.client, "authorization": files.fill(expected.authorization)}
        ]


@pytest.fixture(autouse=True)
def no_environment_proxy(monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("case", CORPUS, ids=[case.id for case in CORPUS])
async def test_corpus(case: Case, server: TlsServer, tmp_path: Path):
    files = folder(tmp_path, server)
    if case.output is not None or "exec" in case.user:
        files.plugin_prints(case.output)
    path = files.write("config", case.cluster, case.user)
    check(await outcome(config_file=str(path)), case.expected, server, files, path)


async def test_exec_gets_its_env_args_no_stdin_and_no_cluster_info_unasked(server, tmp_path):
    """kubectl: the plugin runs with the kubeconfig's env and args, stdin not attached (interactiveMode
    Never), ``KUBERNETES_EXEC_INFO`` = {kind, apiVersion, spec: {interactive: false}}."""
    files = folder(tmp_path, server)
    files.plugin_prints(credential(token="t"))
    user = plugin(V1, "  args: [x, y]", "  env: [{name: GREETING, value: hello}]", "  interactiveMode: Never")
    assert await outcome(config_file=str(files.write("config", CA_CLUSTER, user))) == Sent()
    info = {"kind": "ExecCredential", "apiVersion": V1, "spec": {"interactive": False}}
    assert files.runs() == [{"args": ["x", "y"], "greeting": "hello", "stdin": "", "info": info}]


async def test_exec_provide_cluster_info(server, tmp_path):
    """(e) kubectl: ``spec.cluster`` holds the server, tls-server-name, the CA's bytes (read from the CA
    file) in base64, and the cluster's ``client.authentication.k8s.io/exec`` extension as ``config``."""
    files = folder(tmp_path, server)
    files.plugin_prints(credential(token="t"))
    cluster = (
        CA_CLUSTER + "\ntls-server-name: localhost\nextensions:\n- name: client.authentication.k8s.io/exec\n"
    )
    cluster += "  extension: {audience: foo, arbitrary: [1, 2]}"
    user = plugin(V1, "  interactiveMode: Never", "  provideClusterInfo: true")
    assert await outcome(config_file=str(files.write("config", cluster, user))) == Sent()
    expected = {
        "server": server.url,
        "tls-server-name": "localhost",
        "certificate-authority-data": b64(server.pki.ca_pem),
        "config": {"audience": "foo", "arbitrary": [1, 2]},
    }
    assert [run["info"]["spec"] for run in files.runs()] == [{"cluster": expected, "interactive": False}]


@pytest.mark.parametrize(("expires", "runs"), [(timedelta(hours=1), 1), (timedelta(hours=-1), 2)])
async def test_exec_expiration_timestamp(server, tmp_path, expires, runs):
    """kubectl: the credential is kept until its ``expirationTimestamp`` (no leeway), then the plugin runs
    again: two requests, one run while it holds, two once it has passed."""
    files = folder(tmp_path, server)
    stamp = (datetime.now(UTC) + expires).strftime("%Y-%m-%dT%H:%M:%SZ")
    files.plugin_prints(credential(V1BETA1, token="t", expirationTimestamp=stamp))
    hook = AsyncTrainingJobHook(None, config_file=str(files.write("config", CA_CLUSTER, plugin(V1BETA1))))
    try:
        for _ in range(2):
            assert await hook.get_object(JOB, "absent", "default") is None
    finally:
        await hook.close()
    assert len(files.runs()) == runs == len(server.seen) - (2 - runs)


async def test_exec_runs_again_after_a_401(server, tmp_path):
    """kubectl: after a 401 the plugin runs again and the next request carries its new token (kubectl
    returns that 401; the provider, which loads credentials again after a 401, sends the request again)."""
    files = folder(tmp_path, server)
    files.plugin_prints(credential(V1BETA1, token="old"))
    hook = AsyncTrainingJobHook(None, config_file=str(files.write("config", CA_CLUSTER, plugin(V1BETA1))))
    try:
        assert await hook.get_object(JOB, "absent", "default") is None
        server.accepted_tokens = {"new"}
        files.plugin_prints(credential(V1BETA1, token="new"))
        assert await hook.get_object(JOB, "absent", "default") is None
    finally:
        await hook.close()
    assert [seen["authorization"] for seen in server.seen] == ["Bearer old", "Bearer old", "Bearer new"]


async def exec_certificate_rotates(server: TlsServer, tmp_path: Path, request: Callable[..., Awaitable[Any]]):
    """An exec plugin returns alice's certificate, expired at once; then bob's: the second request must
    present bob's. kubectl: 200 as alice, then 200 as bob (it closes the connections on a new certificate)."""
    files = folder(tmp_path, server)
    past = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    files.plugin_prints(
        credential(clientCertificateData="$cert", clientKeyData="$key", expirationTimestamp=past)
    )
    path = files.write("config", CA_CLUSTER, plugin(V1, "  interactiveMode: Never"))
    bob_cert, bob_key = server.pki.issue("bob", server=False)
    bob = credential(clientCertificateData=bob_cert.read_text(), clientKeyData=bob_key.read_text())
    await request(path, lambda: files.plugin_prints(bob))
    assert [seen["client"] for seen in server.seen] == ["alice", "bob"]


async def test_exec_client_certificates_rotate_through_the_hook(server, tmp_path):
    """(a) through the transport: it must build a new TLS context when ``tls_key()`` changes."""

    async def through_hook(path: Path, rotate: Callable[[], None]) -> None:
        hook = AsyncTrainingJobHook(None, config_file=str(path), retry=FAST_RETRY)
        try:
            assert await hook.get_object(JOB, "absent", "default") is None
            rotate()
            assert await hook.get_object(JOB, "absent", "default") is None
        finally:
            await hook.close()

    await exec_certificate_rotates(server, tmp_path, through_hook)


async def test_exec_client_certificates_rotate_in_the_configuration(server, tmp_path):
    """(a) the configuration's part: after ``auth_headers()`` has run the plugin again, ``tls_key()`` has
    changed and ``ssl_context()`` presents the new certificate (sent here with httpx)."""

    async def through_configuration(path: Path, rotate: Callable[[], None]) -> None:
        cfg = await build_configuration(KubeSettings(kube_config_path=str(path)))
        keys = []
        for step in range(2):
            if step:
                rotate()
            await cfg.auth_headers()
            keys.append(cfg.tls_key())
            async with httpx.AsyncClient(verify=cfg.ssl_context()) as client:
                assert (await client.get(f"{server.url}/api")).status_code == 404
        assert keys[0] != keys[1]

    await exec_certificate_rotates(server, tmp_path, through_configuration)


async def test_oidc_refreshes_an_expired_id_token_at_the_issuer(server, tmp_path):
    """kubectl: the id-token's exp has passed, so it is refreshed with the refresh-token at the issuer's
    token endpoint (from its discovery document, over TLS verified with idp-certificate-authority-data):
    200 with Bearer <the new id-token>."""
    files = folder(tmp_path, server)
    server.id_token = jwt("ann", datetime.now(UTC) + timedelta(hours=1))
    expired = jwt("ann", datetime.now(UTC) - timedelta(minutes=1))
    config = f"idp-issuer-url: $url/idp, client-id: kube, client-secret: s, id-token: {expired}"
    config += f", refresh-token: refresh-1, idp-certificate-authority-data: {b64(server.pki.ca_pem)}"
    path = files.write("config", CA_CLUSTER, f"auth-provider: {{name: oidc, config: {{{config}}}}}")
    assert await outcome(config_file=str(path)) == Sent()
    assert server.seen == [{"client": None, "authorization": f"Bearer {server.id_token}"}]
    form = {
        "grant_type": "refresh_token",
        "refresh_token": "refresh-1",
        "client_id": "kube",
        "client_secret": "s",
    }
    assert server.idp_forms == [form]


async def test_merged_kubeconfig_lists(server, tmp_path, monkeypatch):
    """(b) ``KUBECONFIG=a/config:missing:b/config``: the first file to define a name wins, whole (b's
    ``insecure-skip-tls-verify`` on cluster c is dropped); current-context comes from b, the first to set
    one; a missing file is skipped; b's user's relative tokenFile is b's. kubectl: 200 with Bearer from-b,
    the server verified with a's CA."""
    a, b = folder(tmp_path / "a", server), folder(tmp_path / "b", server)
    (b.path / "tok").write_text("from-b\n")
    first = a.write("config", CA_CLUSTER, "token: from-a", current="current-context: ''")
    second = b.write("config", "server: $url\ninsecure-skip-tls-verify: true", "tokenFile: tok")
    first.write_text(first.read_text().replace("name: u\n", "name: other\n"))  # a's user is not u
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join((str(first), str(tmp_path / "missing"), str(second))))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert await outcome() == Sent()
    assert server.seen == [{"client": None, "authorization": "Bearer from-b"}]
    # The same with a's CA missing: the error names a's file and a's folder (b's entry of c was dropped).
    (a.path / "ca.crt").unlink()
    with pytest.raises(ConnectionConfigError, match=f"{first}: cluster 'c'") as caught:
        await build_configuration(KubeSettings())
    assert str(a.path / "ca.crt") in str(caught.value)


async def test_context_override_and_missing_current_context(server, tmp_path):
    """kubectl --context other: 200 with other's user (Bearer second). Without current-context and no
    --context: kubectl (library loader) fails ``invalid configuration: no configuration has been provided``
    (kubectl itself falls back to http://localhost:8080); the provider refuses, naming the field."""
    files = folder(tmp_path, server)
    path = files.write("config", CA_CLUSTER, "token: first", current="")
    text = path.read_text().replace(
        "contexts:\n", "contexts:\n- {name: other, context: {cluster: c, user: u2}}\n"
    )
    path.write_text(text.replace("users:\n", "users:\n- {name: u2, user: {token: second}}\n"))
    assert await outcome(config_file=str(path), cluster_context="other") == Sent()
    assert server.seen == [{"client": None, "authorization": "Bearer second"}]
    error = await outcome(config_file=str(path))
    assert (
        isinstance(error, Exception)
        and "current-context is not set" in str(error)
        and str(path) in str(error)
    )


async def test_a_path_prefixed_server(server, tmp_path):
    """kubectl: ``server: https://h:port/prefix/`` puts /prefix before every path (/prefix/apis/...)."""
    files = folder(tmp_path, server)
    path = files.write("config", "server: $url/prefix/\ncertificate-authority: ca.crt", "token: abc")
    assert await outcome(config_file=str(path)) == Sent()
    assert server.paths == ["/prefix/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/absent"]


# -- proxies and TLS failures --------------------------------------------------------------------------------


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def tunnel(host: str, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
    await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


async def http_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: list[str]) -> None:
    """An HTTP proxy's CONNECT."""
    target = (await reader.readline()).split()[1].decode()
    while (await reader.readline()).strip():
        pass
    seen.append(f"CONNECT {target}")
    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    host, port = target.rsplit(":", 1)
    await tunnel(host.strip("[]"), int(port), reader, writer)


async def socks5(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: list[str]) -> None:
    """A SOCKS5 proxy's CONNECT (RFC 1928), without authentication."""
    _, methods = await reader.readexactly(2)
    await reader.readexactly(methods)
    writer.write(b"\x05\x00")
    _, _, _, kind = await reader.readexactly(4)
    if kind == 3:  # a name: the proxy resolves it (client-go dials socks5 as socks5h)
        host = (await reader.readexactly((await reader.readexactly(1))[0])).decode()
    else:
        host = str(ipaddress.ip_address(await reader.readexactly(4 if kind == 1 else 16)))
    port = int.from_bytes(await reader.readexactly(2), "big")
    seen.append(f"SOCKS5 {host}:{port}")
    writer.write(b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00")
    await tunnel(host, port, reader, writer)


@pytest.fixture
async def proxy(request) -> AsyncIterator[tuple[str, list[str]]]:
    """A proxy on 127.0.0.1 (``request.param``: http or socks5): its URL and what it was asked."""
    seen: list[str] = []
    serve = http_connect if request.param == "http" else socks5
    listener = await asyncio.start_server(lambda r, w: serve(r, w, seen), "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        yield f"{request.param}://127.0.0.1:{port}", seen
    finally:
        listener.close()


@pytest.mark.parametrize(
    "proxy",
    ["http", "socks5"],
    indirect=True,
)
async def test_proxy_url(server, tmp_path, proxy):
    """(d) kubectl: 200 with Bearer abc through the proxy (http: CONNECT; socks5: the proxy resolves the
    name)."""
    url, seen = proxy
    files = folder(tmp_path, server)
    path = files.write("config", f"{CA_CLUSTER}\nproxy-url: {url}", "token: abc")
    assert await outcome(config_file=str(path)) == Sent()
    assert server.seen == [{"client": None, "authorization": "Bearer abc"}]
    assert seen == [
        f"{'CONNECT' if url.startswith('http') else 'SOCKS5'} {server.url.removeprefix('https://')}"
    ]


async def test_an_x509_failure_fails_at_once(server, tmp_path):
    """(h) kubectl: ``tls: failed to verify certificate: x509: certificate signed by unknown authority``,
    not retried: one handshake, though the hook's policy retries transient failures three times."""
    files = folder(tmp_path, server)
    other = make_pki(tmp_path)
    (tmp_path / "ca.crt").write_bytes(other.ca_pem)
    error = await outcome(config_file=str(files.write("config", CA_CLUSTER, "token: abc")))
    assert isinstance(error, Exception) and "certificate verify failed" in str(error)
    assert server.handshakes == ["localhost"]
    assert server.seen == []
