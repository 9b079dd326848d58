"""Kubeflow's real training operator (``training-operator.v1``, built by the provider repository's
scripts/realkube/build-training-operator.sh) against a RealCluster, in place of the agent's emulation.

Its admission webhooks are served and registered the way its manifests (``manifests/base``) do it: a
ValidatingWebhookConfiguration ``validator.training-operator.kubeflow.org`` pointing at the Service
``training-operator`` in ``kubeflow``, and an empty Secret ``training-operator-webhook-cert`` into which the
operator's own cert-controller writes a CA and a serving certificate for ``training-operator.kubeflow.svc``,
then patches the webhooks' caBundle.

It runs as its manifests run it: as the ServiceAccount ``training-operator`` in ``kubeflow``, bound by a
ClusterRoleBinding to the ClusterRole of ``manifests/base/rbac/role.yaml`` of the same module version (kept
beside the binary by the build script, in ``../manifests/role.yaml``), with a token from the TokenRequest API.

Outside a pod three parts of a Deployment are stood in for here:

- the ServiceAccount's projected token: a kubeconfig with a token of that account;

- the Secret's volume mount: the operator waits for ``tls.crt`` in the fixed directory
  ``/tmp/k8s-webhook-server/serving-certs``, and its webhook server reads the pair from
  ``$TMPDIR/k8s-webhook-server/serving-certs``; the pair is copied from the Secret into both (``$TMPDIR`` is
  the cluster's own directory, so only the file the operator stats is shared between clusters);
- the Service's endpoints: the Service has no selector, and an EndpointSlice and Endpoints name the host's
  first non-loopback address (Endpoints refuse loopback) and the operator's webhook port. kube-apiserver
  then needs ``--enable-aggregator-routing=true`` to call that endpoint rather than the ClusterIP.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import socket
import subprocess
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from localkube.realcluster import RealCluster

NAMESPACE = "kubeflow"
SERVICE = "training-operator"
SECRET = "training-operator-webhook-cert"
CA_NAME = "training-operator-ca"  # pkg/cert's caName
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
# The kinds with a validating webhook in v1.9 (MPIJob v1 has none: its controller validates it).
WEBHOOK_KINDS = ("jaxjob", "paddlejob", "pytorchjob", "tfjob", "xgboostjob")
STATED_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # pkg/cert's certDir, only stat'ed
APISERVER_ARGS = ("--enable-aggregator-routing=true",)
# The kubelet, and gates opened by ConfigMaps (localkube.controllers.gates): the operator is the real one.
AGENT_ARGS = ("--runtime", "scripted", "--controllers", "gates")


def host_address() -> str:
    """The host's first non-loopback IPv4 address (the address of the route to a public one; nothing is
    sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("192.0.2.1", 9))
        address = str(sock.getsockname()[0])
    if address.startswith("127."):
        raise RuntimeError("the training operator's webhook needs a non-loopback address; this host has none")
    return address


def webhook_configuration() -> dict[str, Any]:
    """``manifests/base/webhook`` after its kustomize patches: one validator per kind, Service
    ``training-operator`` in ``kubeflow``, no caBundle (the operator injects it)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": [_webhook(kind) for kind in WEBHOOK_KINDS],
    }


def _webhook(kind: str) -> dict[str, Any]:
    return {
        "name": f"validator.{kind}.training-operator.kubeflow.org",
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "service": {"name": SERVICE, "namespace": NAMESPACE, "path": f"/validate-kubeflow-org-v1-{kind}"}
        },
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [
            {
                "apiGroups": ["kubeflow.org"],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": [f"{kind}s"],
            }
        ],
    }


@dataclass
class TrainingOperator:
    """The operator process's ports and where it reads its certificates; ``start(cluster)``."""

    binary: Path
    directory: Path
    webhook_port: int = 0
    health_port: int = 0

    def start(self, cluster: RealCluster) -> subprocess.Popen:
        from localkube.realcluster import free_port

        self.webhook_port = self.webhook_port or free_port()
        self.health_port = self.health_port or free_port()
        tmp = self.directory / "training-operator-tmp"
        certificates = (tmp / "k8s-webhook-server" / "serving-certs", STATED_CERT_DIR)
        self._register(cluster, host_address(), certificates)
        kubeconfig = self._service_account(cluster)
        process = cluster._spawn(
            "training-operator",
            [
                str(self.binary),
                f"--kubeconfig={kubeconfig}",
                f"--webhook-server-port={self.webhook_port}",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                "--leader-elect=false",
                "--zap-devel=false",  # JSON lines
            ],
            env={**os.environ, "MY_POD_NAMESPACE": NAMESPACE, "TMPDIR": str(tmp)},
        )
        probe = functools.partial(self._webhook_answers, cluster)
        cluster.wait_for(lambda: webhook_serves(cluster, NAMESPACE, SECRET, certificates, probe), 120)
        return process

    def _register(self, cluster: RealCluster, address: str, certificates: tuple[Path, ...]) -> None:
        cluster.create_namespace(NAMESPACE)
        secret = provide_webhook_secret(cluster, NAMESPACE, SECRET, SERVICE, CA_NAME)
        mount_certificates(secret, *certificates)
        webhook_endpoint(cluster, NAMESPACE, SERVICE, self.webhook_port, address)
        path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
        cluster.request("POST", path, webhook_configuration())

    def _service_account(self, cluster: RealCluster) -> Path:
        """The operator's ServiceAccount bound to its manifests' ClusterRole; a kubeconfig with its token."""
        role = yaml.safe_load(self.cluster_role.read_text())
        return service_account_kubeconfig(cluster, NAMESPACE, SERVICE, role)

    @property
    def cluster_role(self) -> Path:
        return self.binary.parent.parent / "manifests" / "role.yaml"

    def _webhook_answers(self, cluster: RealCluster) -> bool:
        """Whether kube-apiserver reaches the webhook: a dry-run PyTorchJob with a replica type PyTorch does
        not have is refused by the webhook itself (before that the call fails: no caBundle yet, or nothing
        listening)."""
        container = {"name": "pytorch", "image": "probe"}
        body = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "webhook-probe", "namespace": NAMESPACE},
            "spec": {"pytorchReplicaSpecs": {"Chief": {"template": {"spec": {"containers": [container]}}}}},
        }
        try:
            path = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs?dryRun=All"
            cluster.request("POST", path, body)
        except urllib.error.HTTPError as err:
            status = json.loads(err.read() or b"{}")
            return "denied the request" in str(status.get("message", ""))
        raise RuntimeError("a PyTorchJob with a Chief replica was admitted: the webhook is not in the path")


# -- what a Deployment's pod would have, for a controller run outside one (also localkube.realtrainer) --


def webhook_endpoint(cluster: RealCluster, namespace: str, service: str, port: int, address: str) -> None:
    """The Service ``service`` (port 443, no selector) and an Endpoints and EndpointSlice naming ``address``
    and the controller's webhook ``port``: what the Service's selector would find in a cluster."""
    named = {"name": "webhook-server", "port": port, "protocol": "TCP"}
    objects: list[tuple[str, dict[str, Any]]] = [
        (
            f"/api/v1/namespaces/{namespace}/services",
            {
                "metadata": {"name": service, "labels": {"app": service}},
                "spec": {"ports": [{**named, "port": 443, "targetPort": port}]},
            },
        ),
        (
            f"/api/v1/namespaces/{namespace}/endpoints",
            {"metadata": {"name": service}, "subsets": [{"addresses": [{"ip": address}], "ports": [named]}]},
        ),
        (
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
            {
                "metadata": {
                    "name": service,
                    "labels": {
                        "kubernetes.io/service-name": service,
                        "endpointslice.kubernetes.io/managed-by": "realkube",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
                "ports": [named],
            },
        ),
    ]
    for path, body in objects:
        cluster.request("POST", path, body)


def service_account_kubeconfig(
    cluster: RealCluster, namespace: str, name: str, cluster_role: dict[str, Any]
) -> Path:
    """The ServiceAccount ``name`` bound by a ClusterRoleBinding of its name to ``cluster_role`` (created);
    a kubeconfig with a TokenRequest token of it (the projected token a pod would mount)."""
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": cluster_role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
    cluster.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", cluster_role)
    cluster.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    token = cluster.service_account_token(namespace, name, seconds=4 * 3600)
    return cluster.kubeconfig_for(f"system:serviceaccount:{namespace}:{name}", token)


def provide_webhook_secret(
    cluster: RealCluster, namespace: str, secret: str, service: str, ca_name: str
) -> dict[str, bytes]:
    """Create the webhook Secret already holding a pair its cert-controller accepts (``ca_name``'s CA, the
    Service's DNS name), and return its data. A controller's webhook server reads its pair from disk as it
    starts: given an empty Secret, the cert-controller fills it only once the process runs, and the copy
    onto disk raced the server's start (one real run lost: ``open .../serving-certs/tls.crt: no such file
    or directory``, the manager exited). A pod whose Secret exists finds it in its volume at start."""
    from localkube.realcluster import webhook_certificates

    data = webhook_certificates(ca_name, f"{service}.{namespace}.svc")
    encoded = {name: base64.b64encode(value).decode() for name, value in data.items()}
    cluster.request(
        "POST", f"/api/v1/namespaces/{namespace}/secrets", {"metadata": {"name": secret}, "data": encoded}
    )
    return data


def secret_certificates(cluster: RealCluster, namespace: str, secret: str) -> dict[str, bytes] | None:
    """The webhook Secret's pair, else None."""
    data = cluster.get(f"/api/v1/namespaces/{namespace}/secrets/{secret}").get("data") or {}
    if not {"tls.crt", "tls.key", "ca.crt"} <= set(data):
        return None
    return {name: base64.b64decode(value) for name, value in data.items()}


def mount_certificates(secret: dict[str, bytes], *directories: Path) -> None:
    """Write the Secret's pair into each directory (what the kubelet's Secret volume would hold); files that
    already hold it are left alone, so a watching server sees no write."""
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key", "ca.crt"):
            path = directory / name
            if not path.exists() or path.read_bytes() != secret[name]:
                path.write_bytes(secret[name])


def webhook_serves(
    cluster: RealCluster,
    namespace: str,
    secret: str,
    directories: tuple[Path, ...],
    probe: Callable[[], bool],
) -> bool:
    """One look: the Secret's pair on disk as the kubelet would keep it (the cert-controller may still rotate
    what it was given), then whether kube-apiserver reaches the webhook (``probe``)."""
    current = secret_certificates(cluster, namespace, secret)
    if current is None:
        return False
    mount_certificates(current, *directories)
    return probe()
