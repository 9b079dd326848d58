"""The TrainJob under Kubeflow Trainer's and JobSet's real controllers (localkube.realtrainer): what the tests
install (upstream's runtimes, the documented RBAC with its runtime ClusterRole), the pods' scripts (put on the
pod template through the TrainJob's ``runtimePatches``), and a recording of every TrainJob and JobSet status
and every pod version (three watches), written to tests/fixtures/real-trainer/ with ``REALTRAINER_RECORD=1``.

The agent's scripted runtime reads a JobSet pod's script from the pod's own annotation (the agent without the
Trainer emulation does not know TrainJobs, so the owner chain stops at the batch Job); its per-replica
selectors read ``*replica-type``/``*replica-index`` labels, which JobSet pods do not have, so a script here
uses its ``default`` step (or the pod's name) and gates.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from localkube.realcluster import RealCluster
from localkube.realtrainer import manifests_of

from airflow_provider_training.testing import SCRIPT_ANNOTATION
from tests.real.rbac import RBAC_DOC, bind_documented
from tests.real.real_operator import Api, without_times

GROUP = "trainer.kubeflow.org/v1alpha1"
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
# The upstream ClusterTrainingRuntimes installed unchanged (manifests/base/runtimes of trainer v2.3.0).
RUNTIMES = {
    "torch-distributed": "torch_distributed.yaml",
    "deepspeed-distributed": "deepspeed_distributed.yaml",
}
RECORDINGS = Path(__file__).parents[1] / "fixtures" / "real-trainer"
PATCH_MANAGER = "localkube.dev/tests"  # the webhook wants a domain-prefixed manager


def install_runtimes(cluster: RealCluster, bin_dir: Path) -> list[str]:
    """The upstream runtimes of RUNTIMES, as the build script copied them; their names."""
    for file in RUNTIMES.values():
        body = yaml.safe_load((manifests_of(bin_dir) / "trainer" / "runtimes" / file).read_text())
        cluster.request("POST", f"{TRAINJOBS}/clustertrainingruntimes", body)
    return list(RUNTIMES)


def bind_documented_with_runtimes(cluster: RealCluster) -> Path:
    """The documented Role (tests.real.rbac) and docs/rbac.md's ClusterRole for the runtimes, bound to the
    same account with a ClusterRoleBinding as the page says; the account's kubeconfig."""
    kubeconfig = bind_documented(cluster)
    blocks = re.findall(r"```yaml\n(.*?)```", RBAC_DOC.read_text(), re.S)
    (role,) = [d for b in blocks for d in yaml.safe_load_all(b) if d and d["kind"] == "ClusterRole"]
    subject = yaml.safe_load(kubeconfig.read_text())["users"][0]["name"].split(
        ":"
    )  # system:serviceaccount:ns:n
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": role["metadata"]["name"]},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "namespace": subject[2], "name": subject[3]}],
    }
    cluster.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    cluster.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    cluster.wait_for(lambda: can_get_runtimes(cluster, token), 30)
    return kubeconfig


def can_get_runtimes(cluster: RealCluster, token: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "group": "trainer.kubeflow.org",
                "resource": "clustertrainingruntimes",
                "verb": "get",
            }
        },
    }
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    return bool(json.loads(cluster.request("POST", path, review, token=token))["status"].get("allowed"))


def scripted(script: dict[str, Any], **by_job: dict[str, Any]) -> list[dict[str, Any]]:
    """``runtimePatches`` putting ``script`` on the pod template of the runtime's replicated job ``node``, and
    each of ``by_job`` (``launcher=...``) on its replicated job's."""
    replicated = [
        {
            "name": job,
            "template": {
                "spec": {"template": {"metadata": {"annotations": {SCRIPT_ANNOTATION: json.dumps(one)}}}}
            },
        }
        for job, one in {"node": script, **by_job}.items()
    ]
    return [
        {
            "manager": PATCH_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": replicated}}},
        }
    ]


def new_gate(name: str) -> str:
    """A gate for the job ``name`` (one per job: a gate stays open; a cluster lives for one session)."""
    return f"{name}-gate"


@dataclass
class Seen:
    """What the watches delivered so far: the TrainJob's and the JobSet's statuses (consecutive equal ones
    once, times blanked) and, per pod name, each version's phase (``Deleted`` for its DELETED event), and
    each pod's last version."""

    trainjob: list[dict[str, Any]] = field(default_factory=list)
    jobset: list[dict[str, Any]] = field(default_factory=list)
    pods: dict[str, list[str]] = field(default_factory=dict)
    pod_objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)  # "trainjob", "jobset" once their DELETED event came
    error: BaseException | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)

    def add(self, what: str, type_: str, obj: dict[str, Any]) -> None:
        with self.changed:
            if what == "pod":
                name = obj["metadata"]["name"]
                phase = "Deleted" if type_ == "DELETED" else (obj.get("status") or {}).get("phase", "")
                versions = self.pods.setdefault(name, [])
                if not versions or versions[-1] != phase:
                    versions.append(phase)
                self.pod_objects[name] = obj
            else:
                statuses = getattr(self, what)
                status = without_times(obj.get("status") or {})
                if not statuses or statuses[-1] != status:
                    statuses.append(status)
                if type_ == "DELETED":
                    self.deleted.add(what)
            self.changed.notify_all()

    def wait_until(self, check: Callable[[Seen], bool], timeout: float = 120) -> None:
        """Block until what was seen satisfies ``check`` (re-checked on every change)."""
        end = time.monotonic() + timeout
        with self.changed:
            while not check(self):
                if self.error is not None:
                    raise self.error
                if time.monotonic() > end:
                    raise AssertionError(f"not reached: {check.__name__}: {self.trainjob[-1:]} {self.pods}")
                self.changed.wait(0.5)

    def live_pods(self) -> set[str]:
        return {name for name, phases in self.pods.items() if phases[-1] != "Deleted"}


def condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def has(statuses: list[dict[str, Any]], type_: str, value: str = "True") -> int | None:
    """The index of the first status with condition ``type_`` at ``value``, or None."""
    return next(
        (i for i, s in enumerate(statuses) if (condition(s, type_) or {}).get("status") == value), None
    )


def pods_running(seen: Seen) -> bool:
    return any(phases[-1] == "Running" for phases in seen.pods.values())


def suspended_without_pods(seen: Seen) -> bool:
    return has(seen.trainjob, "Suspended") is not None and bool(seen.pods) and not seen.live_pods()


def running_after_resume(seen: Seen) -> bool:
    resumed = has(seen.trainjob, "Suspended", "False")
    return resumed is not None and any(
        phases[-1] == "Running" for name, phases in seen.pods.items() if "Deleted" not in phases
    )


@contextmanager
def recording(api: Api, namespace: str, name: str) -> Iterator[Seen]:
    """Watch the TrainJob ``name`` and its JobSet (from before they exist) and the JobSet's pods, until the
    block ends."""
    seen = Seen()
    watches = [
        (
            "trainjob",
            f"{TRAINJOBS}/namespaces/{namespace}/trainjobs",
            f"fieldSelector=metadata.name%3D{name}",
        ),
        ("jobset", f"{JOBSETS}/namespaces/{namespace}/jobsets", f"fieldSelector=metadata.name%3D{name}"),
        (
            "pod",
            f"/api/v1/namespaces/{namespace}/pods",
            f"labelSelector={urllib.parse.quote(f'{JOBSET_LABEL}={name}')}",
        ),
    ]
    stopping = threading.Event()
    responses = []
    threads = []
    for what, path, selector in watches:
        version = api.get(path)["metadata"]["resourceVersion"]
        response = api.open(
            f"{path}?watch=true&{selector}&resourceVersion={version}&timeoutSeconds=600", timeout=600
        )
        responses.append(response)

        def read(response: Any = response, what: str = what) -> None:
            try:
                for line in response:
                    event = json.loads(line)
                    seen.add(what, event["type"], event["object"])
            except BaseException as exc:  # reported unless the block closed the watch
                if not stopping.is_set():
                    seen.error = exc

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        threads.append(thread)
    try:
        yield seen
    finally:
        stopping.set()
        for response in responses:
            response.fp.raw._sock.shutdown(2)
            response.close()
        for thread in threads:
            thread.join(10)
    assert seen.error is None, seen.error


def pod_record(pod: dict[str, Any]) -> dict[str, Any]:
    """What the controllers made of a pod: labels, annotations, hostname, subdomain, the containers' env,
    ports and command, the restart policy (generated names and uids blanked)."""
    meta, spec = pod["metadata"], pod["spec"]
    return without_ids(
        {
            "generateName": meta.get("generateName"),
            "labels": meta.get("labels", {}),
            "annotations": meta.get("annotations", {}),
            "hostname": spec.get("hostname"),
            "subdomain": spec.get("subdomain"),
            "restartPolicy": spec.get("restartPolicy"),
            "containers": [
                {k: c.get(k) for k in ("name", "image", "command", "args", "env", "ports")}
                for c in spec["containers"]
            ],
        }
    )


IDS = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$|^[0-9a-f]{40}$")


def without_ids(value: Any) -> Any:
    """``value`` with uids and JobSet's job-key hashes written ``<id>``."""
    if isinstance(value, dict):
        return {k: without_ids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    return "<id>" if isinstance(value, str) and IDS.match(value) else value


def stable_names(value: Any, pods: dict[str, dict[str, Any]]) -> Any:
    """``value`` with each pod's generated name written ``<generateName>xxxxx`` (it differs on every run)."""
    text = json.dumps(value)
    for name, pod in pods.items():
        prefix = pod["metadata"].get("generateName")
        if prefix and name.startswith(prefix):
            text = text.replace(name, f"{prefix}xxxxx")
    return json.loads(text)


def save(scenario: str, data: dict[str, Any]) -> Path:
    """Write ``data`` to tests/fixtures/real-trainer/<scenario>.json (sorted keys)."""
    RECORDINGS.mkdir(parents=True, exist_ok=True)
    path = RECORDINGS / f"{scenario}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path
