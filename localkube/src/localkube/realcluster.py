"""A real Kubernetes control plane on 127.0.0.1, the referee for tests (the provider's tests/real, and
localkube's own API tests when ``REALKUBE_BIN`` is set).

etcd, kube-apiserver (RBAC, token authentication, service-account tokens) and kube-controller-manager (garbage
collection, Jobs, ReplicaSets, service accounts) from the binaries the provider repository's
scripts/realkube/build.sh builds, plus
``localkube agent`` as the training operators and the kubelet (it binds pods itself: no kube-scheduler), or,
with ``training_operator``, as the kubelet only beside Kubeflow's real training operator (with ``trainer``,
beside Kubeflow Trainer's and JobSet's real controllers).
Everything listens on free ports of 127.0.0.1 and lives in one directory; ``stop()`` ends the processes it
started.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import logging
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from localkube import realoperator, realtrainer

log = logging.getLogger(__name__)

ADMIN = "admin"
# Two CRDs of one name cannot both be installed: where a directory holds both MPIJobs, the Kubeflow v1 one is
# installed (a cluster without the v1 CRDs installs the MPI Operator's v2beta1 one).
SKIPPED_BESIDE = {"kubeflow.org-v2beta1/mpijobs.yaml": "kubeflow.org-v1/mpijobs.yaml"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: str,
    key: rsa.RSAPrivateKey,
    issuer: x509.Name | None,
    signer: rsa.RSAPrivateKey,
    names: tuple[str, ...] = ("localhost", "127.0.0.1"),
    days: int = 2,
) -> x509.Certificate:
    """A certificate for ``subject`` valid ``days``, its subject alternative ``names`` (DNS names or IP
    addresses): a CA when self-signed (``issuer`` None), else a serving certificate."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName([_alternative(n) for n in names]), False)
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    return builder.sign(signer, hashes.SHA256())


def _alternative(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def webhook_certificates(ca_name: str, dns_name: str) -> dict[str, bytes]:
    """A webhook Secret's data as open-policy-agent's cert-controller writes and accepts it: ``ca.crt`` and
    ``ca.key`` (a CA valid for ``ca_name``) and ``tls.crt``/``tls.key`` for ``dns_name`` (``<service>.
    <namespace>.svc``), valid a year, so beyond its 90-day look-ahead it finds nothing to refresh."""
    ca_key, key = (rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2))
    ca = _certificate(ca_name, ca_key, None, ca_key, names=(ca_name,), days=365)
    serving = _certificate(dns_name, key, ca.subject, ca_key, names=(dns_name,), days=365)
    return {
        "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
        "ca.key": _pem(ca_key),
        "tls.crt": serving.public_bytes(serialization.Encoding.PEM),
        "tls.key": _pem(key),
    }


def write_client_certificate(
    directory: Path, name: str, user: str, groups: tuple[str, ...], ca: Path, ca_key: Path
) -> tuple[Path, Path]:
    """A client certificate for ``user`` in ``groups`` (CN and O's, as kube-apiserver reads them) signed by
    the CA ``ca``/``ca_key``: ``(name.crt, name.key)`` in ``directory``."""
    signer = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    assert isinstance(signer, rsa.RSAPrivateKey)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
    subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(x509.load_pem_x509_certificate(ca.read_bytes()).subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(signer, hashes.SHA256())
    )
    paths = directory / f"{name}.crt", directory / f"{name}.key"
    paths[0].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(_pem(key))
    return paths


def write_certificates(directory: Path) -> dict[str, Path]:
    """A CA, the API server's serving certificate signed by it, the service-account key pair, and the client
    certificate kube-apiserver presents to kubelets (``--kubelet-client-certificate``)."""
    ca_key, key = (rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2))
    ca = _certificate("realkube-ca", ca_key, None, ca_key, names=())
    serving = _certificate("kube-apiserver", key, ca.subject, ca_key)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    paths = {
        "ca": directory / "ca.crt",
        "ca_key": directory / "ca.key",
        "cert": directory / "apiserver.crt",
        "key": directory / "apiserver.key",
        "sa_key": directory / "sa.key",
        "sa_pub": directory / "sa.pub",
    }
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["ca_key"].write_bytes(_pem(ca_key))
    paths["cert"].write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(_pem(key))
    paths["sa_key"].write_bytes(_pem(sa_key))
    paths["sa_pub"].write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    paths["kubelet_client_cert"], paths["kubelet_client_key"] = write_client_certificate(
        directory,
        "kubelet-client",
        "kube-apiserver-kubelet-client",
        ("system:masters",),
        paths["ca"],
        paths["ca_key"],
    )
    return paths


@dataclass
class RealCluster:
    """The control plane and the agent. ``start()``, then ``kubeconfig`` (cluster admin), ``kubeconfig_for``
    (another token), ``request`` (the API as admin); ``stop()``."""

    bin_dir: Path
    directory: Path
    crd_dir: Path
    # Only the operators (kube-controller-manager is the Job and ReplicaSet controller here), and the gates a
    # test opens with a labelled ConfigMap.
    agent_args: tuple[str, ...] = ("--runtime", "scripted", "--controllers", "kubeflow,gates")
    # Flags added to kube-apiserver's (a dedicated cluster's: e.g. ``--watch-cache=false``).
    apiserver_args: tuple[str, ...] = ()
    # Flags added to kube-controller-manager's (e.g. a short ``--node-monitor-grace-period``).
    controller_manager_args: tuple[str, ...] = ()
    # Kubeflow's real training operator (its binary) in place of the agent's emulation: the agent then runs
    # only the kubelet, and kube-apiserver routes to the operator's webhook endpoint (localkube.realoperator).
    training_operator: Path | None = None
    # The directory of Kubeflow Trainer's and JobSet's real controllers (scripts/realkube/build-trainer.sh):
    # both run, JobSet first, with the agent as the kubelet only (localkube.realtrainer). ``crd_dir`` should
    # hold their CRDs (realtrainer.write_crd_dir).
    trainer: Path | None = None
    url: str = ""
    version: str = ""
    crds_installed: list[str] = field(default_factory=list)
    crds_dropped: dict[str, str] = field(default_factory=dict)
    _processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    _token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        if self.training_operator is not None:
            self.agent_args = realoperator.AGENT_ARGS
            self.apiserver_args = (*self.apiserver_args, *realoperator.APISERVER_ARGS)
        if self.trainer is not None:
            self.agent_args = realtrainer.AGENT_ARGS
            self.apiserver_args = (*self.apiserver_args, *realtrainer.APISERVER_ARGS)

    # -- start and stop ----------------------------------------------------------------------------------

    def start(self) -> None:
        started = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.certs = write_certificates(self.directory)
        try:
            self._start_etcd()
            self._start_apiserver()
            self._wait_ready()
            # CRDs first: the garbage collector discovers resource types at start, then only every 30 s, and
            # a foreground deletion of a kind it does not know yet waits for that.
            self.install_crds()
            self._start_controller_manager()
            self._start_agent()
            if self.training_operator is not None:
                realoperator.TrainingOperator(self.training_operator, self.directory).start(self)
            if self.trainer is not None:
                realtrainer.start(self, self.trainer)
            self.wait_for(lambda: self.get_or_none("/api/v1/namespaces/default/serviceaccounts/default"), 60)
        except BaseException:
            self.stop()
            raise
        log.info("real cluster %s up in %.1f s at %s", self.version, time.monotonic() - started, self.url)

    def stop(self) -> None:
        for name, process in reversed(list(self._processes.items())):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop on SIGTERM; killing it", name)
                    process.kill()
                    process.wait()
        self._processes.clear()

    def _spawn(self, name: str, args: list[str], **kwargs: Any) -> subprocess.Popen:
        logfile = (self.directory / f"{name}.log").open("wb")
        process = subprocess.Popen(args, stdout=logfile, stderr=subprocess.STDOUT, **kwargs)
        self._processes[name] = process
        return process

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.directory / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def _check_alive(self) -> None:
        for name, process in self._processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.log_tail(name)}")

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--data-dir",
                str(self.directory / "etcd"),
                "--listen-client-urls",
                self.etcd_url,
                "--advertise-client-urls",
                self.etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",  # a throwaway test database: no fsync keeps a busy disk out of it
            ],
        )

    def _start_apiserver(self, port: int | None = None) -> None:
        port = port or free_port()
        self.url = f"https://127.0.0.1:{port}"
        tokens = self.directory / "tokens.csv"
        tokens.write_text(f'{self._token},{ADMIN},{ADMIN},"system:masters"\n')
        self._spawn(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                f"--secure-port={port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # The `kubernetes` Service's endpoints may not be loopback addresses; nothing here needs them.
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={self.certs['cert']}",
                f"--tls-private-key-file={self.certs['key']}",
                f"--client-ca-file={self.certs['ca']}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={self.certs['sa_pub']}",
                f"--service-account-signing-key-file={self.certs['sa_key']}",
                "--service-cluster-ip-range=10.96.0.0/16",
                f"--kubelet-client-certificate={self.certs['kubelet_client_cert']}",
                f"--kubelet-client-key={self.certs['kubelet_client_key']}",
                *self.apiserver_args,
            ],
        )
        self.kubeconfig = self.kubeconfig_for(ADMIN, self._token)

    def restart_apiserver(self) -> float:
        """Kill kube-apiserver (SIGKILL, a crash: SIGTERM would drain the watches for up to a minute) and
        start it again with the same flags, port and etcd; returns once it is ready, with the seconds it was
        down."""
        stopped = time.monotonic()
        order = list(self._processes)  # stop() ends them in reverse: kube-apiserver after its clients
        process = self._processes.pop("kube-apiserver")
        process.kill()
        process.wait(timeout=30)
        (self.directory / "kube-apiserver.log").rename(self.directory / f"kube-apiserver.{stopped:.0f}.log")
        self._start_apiserver(int(self.url.rpartition(":")[2]))
        self._processes = {name: self._processes[name] for name in order}
        self._wait_ready()
        return time.monotonic() - stopped

    def etcd_revision(self) -> int:
        """etcd's current revision, from its v3 HTTP gateway."""
        return int(self._etcd("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (what kube-apiserver does every 5 minutes):
        a watch from an older resourceVersion is then answered 410 Gone. Returns the revision."""
        revision = self.etcd_revision()
        self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=30) as response:
            return dict(json.loads(response.read()))

    def _wait_ready(self) -> None:
        self.wait_for(lambda: self._ready(), 120)
        self.version = json.loads(self.request("GET", "/version"))["gitVersion"]

    def _ready(self) -> bool:
        try:
            return self.request("GET", "/readyz") == b"ok"
        except (OSError, urllib.error.URLError):
            return False

    def _start_controller_manager(self) -> None:
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                "--controllers=*",
                f"--service-account-private-key-file={self.certs['sa_key']}",
                f"--root-ca-file={self.certs['ca']}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                *self.controller_manager_args,
            ],
        )

    def _start_agent(self) -> None:
        self._spawn(
            "agent",
            [
                sys.executable,
                "-m",
                "localkube",
                "agent",
                "--kubeconfig",
                str(self.kubeconfig),
                "--client-ca-file",  # only kube-apiserver (its kubelet client certificate) reads logs
                str(self.certs["ca"]),
                *self.agent_args,
            ],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.wait_for(lambda: "localkube agent node" in self.log_tail("agent", 200), 60)

    def kill_agent(self) -> None:
        """SIGKILL ``localkube agent`` (a crash: the containers it runs end with it); its log is set aside."""
        process = self._processes.pop("agent")
        process.kill()
        process.wait(timeout=30)
        (self.directory / "agent.log").rename(self.directory / f"agent.{time.monotonic():.0f}.log")

    def start_agent(self) -> None:
        """Start ``localkube agent`` again (after ``kill_agent``); returns once it serves."""
        self._start_agent()

    # -- CRDs --------------------------------------------------------------------------------------------

    def install_crds(self) -> None:
        """Every CRD under ``crd_dir``; what the server refuses is dropped and listed in ``crds_dropped``."""
        for path in sorted(self.crd_dir.glob("*/*.yaml")):
            rel = f"{path.parent.name}/{path.name}"
            beside = SKIPPED_BESIDE.get(rel)
            if beside is not None and (self.crd_dir / beside).exists():
                self.crds_dropped[rel] = f"same name as {beside}"
                continue
            body = yaml.safe_load(path.read_text())
            try:
                self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)
            except urllib.error.HTTPError as err:
                self.crds_dropped[rel] = f"{err.code}: {err.read().decode(errors='replace')[:500]}"
                log.warning("CRD %s dropped: %s", rel, self.crds_dropped[rel])
                continue
            self.crds_installed.append(body["metadata"]["name"])
        for name in self.crds_installed:
            self.wait_for(lambda name=name: self._established(name), 60)

    def _established(self, name: str) -> bool:
        crd = json.loads(
            self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        )
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    # -- access ------------------------------------------------------------------------------------------

    def kubeconfig_for(self, user: str, token: str) -> Path:
        path = self.directory / f"{user.replace(':', '-')}.kubeconfig"
        ca = base64.b64encode(self.certs["ca"].read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "real", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "real", "context": {"cluster": "real", "user": user}}],
            "current-context": "real",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
    ) -> bytes:
        """One API call (as cluster admin unless ``token``); raises urllib's HTTPError on an error status."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self._token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        context = ssl.create_default_context(cafile=str(self.certs["ca"]))
        with urllib.request.urlopen(req, context=context, timeout=30) as response:
            return bytes(response.read())

    def get(self, path: str) -> dict[str, Any]:
        return dict(json.loads(self.request("GET", path)))

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None when the server answers 404 (any other error is raised)."""
        try:
            return self.get(path)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create ``manifest`` (namespaced core, rbac or custom objects) as admin."""
        return dict(json.loads(self.request("POST", collection_path(manifest), manifest)))

    def create_namespace(self, name: str) -> None:
        try:
            self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        except urllib.error.HTTPError as err:
            if err.code != 409:
                raise
        self.wait_for(lambda: self.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default"), 60)

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A token of the ServiceAccount from the TokenRequest API (what kubelets and `kubectl create token`
        use)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        answer = json.loads(
            self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)
        )
        return str(answer["status"]["token"])

    def wait_for(self, check: Any, timeout: float) -> Any:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self._check_alive()
            value = check()
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"condition not met within {timeout}s: {check}")


def collection_path(manifest: dict[str, Any]) -> str:
    """The collection URL of a namespaced object (or a Namespace)."""
    group, _, version = manifest["apiVersion"].rpartition("/")
    plural = manifest["kind"].lower() + "s"
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    namespace = manifest.get("metadata", {}).get("namespace")
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
