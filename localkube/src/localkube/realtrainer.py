"""Kubeflow Trainer's real controller manager (v2.3.0) and the JobSet controller it drives (v0.12.0), both
built by the provider repository's scripts/realkube/build-trainer.sh, against a RealCluster: the agent is then
only the kubelet.

Each runs as its own manifests run it (copied unchanged beside the binaries, in ``../manifests/``):

- JobSet as its release manifests (``config/default``) do: namespace ``jobset-system`` (the default of its
  cert package outside a pod), ServiceAccount ``jobset-controller-manager`` bound to ``rbac/role.yaml``'s
  ClusterRole and to the Role ``manager_secrets_role.yaml`` (both with kustomize's ``jobset-`` name prefix),
  its ``controller_manager_config.yaml`` (internal cert management on) with this host's ports and leader
  election off, the webhook configurations of ``webhook/manifests.yaml`` after its kustomize patches (names
  ``jobset-{mutating,validating}-webhook-configuration``, Service ``jobset-webhook-service``, the pod
  webhooks only for pods labelled ``jobset.sigs.k8s.io/jobset-name``), an empty Secret
  ``jobset-webhook-server-cert``, and the CRD's conversion stanza of ``crd/patches/webhook_in_jobsets.yaml``
  (never called: one version).
- The Trainer as ``manifests/overlays/manager`` does: namespace ``kubeflow-system``, ServiceAccount and
  ClusterRole ``kubeflow-trainer-controller-manager``, its ``controller_manager_config.yaml`` with this
  host's ports and leader election off, ``webhook/manifests.yaml`` after its patches (names
  ``defaulter.trainer.kubeflow.org`` and ``validator.trainer.kubeflow.org``, Service
  ``kubeflow-trainer-controller-manager``, the runtime validators skipping objects labelled
  ``trainer.kubeflow.org/webhook-validation=disabled``), an empty Secret ``kubeflow-trainer-webhook-cert``.
  (The overlay installs JobSet into ``kubeflow-system`` too; outside a pod JobSet cannot learn that namespace,
  so it runs as JobSet's own release installs it, which the overlay's comment allows.)

Each Secret is created holding a CA and serving pair its open-policy-agent cert-controller accepts (so it
only patches the webhooks' caBundle, and the pair is on disk before the webhook server starts); JobSet is
started first and the Trainer once JobSet's webhook answers (the Trainer creates JobSets). The pod parts are
stood in for as for the training operator (localkube.realoperator): a token kubeconfig, the Secret's pair
copied into the webhook server's ``$TMPDIR/k8s-webhook-server/serving-certs`` (each its own ``TMPDIR``) and
into the fixed ``/tmp/k8s-webhook-server/serving-certs`` the cert-controller stats, and selector-less Services
with Endpoints to this host's address.
"""

from __future__ import annotations

import copy
import functools
import os
import subprocess
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from localkube.realoperator import (  # noqa: F401 (AGENT_ARGS, APISERVER_ARGS: the same as the operator's)
    AGENT_ARGS,
    APISERVER_ARGS,
    STATED_CERT_DIR,
    host_address,
    mount_certificates,
    provide_webhook_secret,
    service_account_kubeconfig,
    webhook_endpoint,
    webhook_serves,
)

if TYPE_CHECKING:
    from localkube.realcluster import RealCluster

TRAINER_BINARY = "trainer-controller-manager"
JOBSET_BINARY = "jobset"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def manifests_of(bin_dir: Path) -> Path:
    return bin_dir.parent / "manifests"


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def write_crd_dir(bin_dir: Path, target: Path) -> Path:
    """A RealCluster ``crd_dir`` with the Trainer's three CRDs and JobSet's (with the conversion stanza its
    release manifests add), as the build script copied them."""
    manifests = manifests_of(bin_dir)
    trainer = target / "trainer.kubeflow.org-v1alpha1"
    jobset = target / "jobset.x-k8s.io-v1alpha2"
    for directory in (trainer, jobset):
        directory.mkdir(parents=True, exist_ok=True)
    for path in sorted((manifests / "trainer" / "crds").glob("*.yaml")):
        (trainer / path.name).write_text(path.read_text())
    crd = load_all(manifests / "jobset" / "crds" / "jobset.x-k8s.io_jobsets.yaml")[0]
    crd["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {
                "service": {"namespace": JOBSET.namespace, "name": JOBSET.service, "path": "/convert"}
            },
            "conversionReviewVersions": ["v1"],
        },
    }
    (jobset / "jobsets.yaml").write_text(yaml.safe_dump(crd))
    return target


@dataclass(frozen=True)
class Install:
    """Where one controller's manifests put it, after their kustomizations."""

    name: str  # the binary, and the process's log name
    component: str  # the directory under manifests/
    namespace: str
    service_account: str
    service: str
    secret: str
    ca_name: str  # its cert package's caName
    mutating: str
    validating: str
    prefix: str = ""  # kustomize namePrefix of the RBAC objects
    # webhook name -> objectSelector its patches add
    selectors: dict[str, dict[str, Any]] = field(default_factory=dict)


JOBSET = Install(
    name=JOBSET_BINARY,
    component="jobset",
    namespace="jobset-system",
    service_account="jobset-controller-manager",
    service="jobset-webhook-service",
    secret="jobset-webhook-server-cert",
    ca_name="jobset-ca",
    mutating="jobset-mutating-webhook-configuration",
    validating="jobset-validating-webhook-configuration",
    prefix="jobset-",
    selectors={
        name: {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
        for name in ("mpod.kb.io", "vpod.kb.io")
    },
)
TRAINER = Install(
    name=TRAINER_BINARY,
    component="trainer",
    namespace="kubeflow-system",
    service_account="kubeflow-trainer-controller-manager",
    service="kubeflow-trainer-controller-manager",
    secret="kubeflow-trainer-webhook-cert",
    ca_name="kubeflow-trainer-ca",
    mutating="defaulter.trainer.kubeflow.org",
    validating="validator.trainer.kubeflow.org",
    selectors={
        f"validator.{kind}.trainer.kubeflow.org": {
            "matchExpressions": [
                {
                    "key": "trainer.kubeflow.org/webhook-validation",
                    "operator": "NotIn",
                    "values": ["disabled"],
                }
            ]
        }
        for kind in ("clustertrainingruntime", "trainingruntime")
    },
)


def webhook_configurations(install: Install, manifests: Path) -> list[dict[str, Any]]:
    """``webhook/manifests.yaml`` as its kustomization renders it: the configurations renamed, every
    webhook's Service the controller's in its namespace, the patches' objectSelectors added."""
    rendered = []
    for doc in load_all(manifests / install.component / "webhook" / "manifests.yaml"):
        doc = copy.deepcopy(doc)
        mutating = doc["kind"] == "MutatingWebhookConfiguration"
        doc["metadata"] = {"name": install.mutating if mutating else install.validating}
        for webhook in doc["webhooks"]:
            service = webhook["clientConfig"]["service"]
            service.update(name=install.service, namespace=install.namespace)
            if webhook["name"] in install.selectors:
                webhook["objectSelector"] = install.selectors[webhook["name"]]
        rendered.append(doc)
    return rendered


@dataclass
class Controller:
    """One controller process: ``start(cluster)`` registers what its manifests install, runs it, and returns
    once kube-apiserver reaches its webhook."""

    install: Install
    bin_dir: Path
    directory: Path
    webhook_port: int = 0
    health_port: int = 0

    @property
    def manifests(self) -> Path:
        return manifests_of(self.bin_dir) / self.install.component

    def start(self, cluster: RealCluster) -> subprocess.Popen:
        from localkube.realcluster import free_port

        install = self.install
        self.webhook_port = self.webhook_port or free_port()
        self.health_port = self.health_port or free_port()
        tmp = self.directory / f"{install.name}-tmp"
        certificates = (tmp / "k8s-webhook-server" / "serving-certs", STATED_CERT_DIR)
        cluster.create_namespace(install.namespace)
        secret = provide_webhook_secret(
            cluster, install.namespace, install.secret, install.service, install.ca_name
        )
        mount_certificates(secret, *certificates)
        webhook_endpoint(cluster, install.namespace, install.service, self.webhook_port, host_address())
        for configuration in webhook_configurations(install, manifests_of(self.bin_dir)):
            plural = configuration["kind"].lower() + "s"
            cluster.request("POST", f"{ADMISSION}/{plural}", configuration)
        kubeconfig = self._service_account(cluster)
        config = self.directory / f"{install.name}-config.yaml"
        config.write_text(yaml.safe_dump(self._config(free_port())))
        process = cluster._spawn(
            install.name,
            [
                str(self.bin_dir / install.name),
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                "--zap-log-level=2",  # as the manifests run them
            ],
            env={**os.environ, "TMPDIR": str(tmp), "KUBECONFIG": str(kubeconfig)},
        )
        probe = functools.partial(self._webhook_answers, cluster)
        cluster.wait_for(
            lambda: webhook_serves(cluster, install.namespace, install.secret, certificates, probe), 120
        )
        return process

    def _config(self, metrics_port: int) -> dict[str, Any]:
        """The manifests' controller_manager_config.yaml, with this host's ports and no leader election (one
        replica)."""
        config = load_all(self.manifests / "manager" / "controller_manager_config.yaml")[0]
        config.setdefault("leaderElection", {})["leaderElect"] = False
        config.setdefault("health", {})["healthProbeBindAddress"] = f"127.0.0.1:{self.health_port}"
        config.setdefault("metrics", {})["bindAddress"] = f"127.0.0.1:{metrics_port}"
        config.setdefault("webhook", {})["port"] = self.webhook_port
        if "statusServer" in config:
            from localkube.realcluster import free_port

            config["statusServer"]["port"] = free_port()
        return config

    def _service_account(self, cluster: RealCluster) -> Path:
        install = self.install
        rbac = self.manifests / "rbac"
        role = load_all(rbac / "role.yaml")[0]
        role["metadata"]["name"] = install.prefix + role["metadata"]["name"]
        kubeconfig = service_account_kubeconfig(cluster, install.namespace, install.service_account, role)
        secrets_role = rbac / "manager_secrets_role.yaml"
        if secrets_role.exists():  # JobSet's: its Secret, in its namespace
            role = load_all(secrets_role)[0]
            name = install.prefix + role["metadata"]["name"]
            role["metadata"] = {"name": name, "namespace": install.namespace}
            binding = {
                "metadata": {"name": name, "namespace": install.namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": install.service_account,
                        "namespace": install.namespace,
                    }
                ],
            }
            base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{install.namespace}"
            cluster.request("POST", f"{base}/roles", role)
            cluster.request("POST", f"{base}/rolebindings", binding)
        return kubeconfig

    def _webhook_answers(self, cluster: RealCluster) -> bool:
        """Whether kube-apiserver reaches the webhooks: a dry-run object their rules match (a one-job JobSet;
        upstream's torch-distributed ClusterTrainingRuntime) is admitted. Until the controller serves with the
        caBundle in place the call fails (``failurePolicy: Fail``)."""
        if self.install is JOBSET:
            path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{JOBSET.namespace}/jobsets?dryRun=All"
            pod = {"containers": [{"name": "c", "image": "probe"}], "restartPolicy": "Never"}
            body: dict[str, Any] = {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "webhook-probe", "namespace": JOBSET.namespace},
                "spec": {
                    "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": pod}}}}]
                },
            }
        else:
            path = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes?dryRun=All"
            body = load_all(self.manifests / "runtimes" / "torch_distributed.yaml")[0]
        try:
            cluster.request("POST", path, body)
        except urllib.error.HTTPError as err:
            if err.code < 500:  # not a webhook call that failed: the probe itself is wrong
                raise RuntimeError(f"{self.install.name}'s probe refused: {err.read().decode()}") from err
            return False
        return True


def start(cluster: RealCluster, bin_dir: Path) -> None:
    """JobSet, then the Trainer (it creates JobSets, whose webhook must answer first)."""
    for install in (JOBSET, TRAINER):
        Controller(install, bin_dir, cluster.directory).start(cluster)
