"""Kubeflow Trainer v2 (`trainer.kubeflow.org/v1alpha1`, kubeflow/trainer v2.3.0): TrainJob to JobSet.

Served when the Trainer CRDs are loaded (tests/fixtures/crds/trainer.kubeflow.org-v1alpha1) beside JobSet's,
which `JobSetController` runs; this controller idles otherwise. As upstream's `trainjob_controller.go` and
its runtime plugins (`pkg/runtime/framework/plugins/{jobset,torch,mpi}`):

- **JobSet** named as the TrainJob, controlled by it: the (Cluster)TrainingRuntime's `template` (its
  labels and annotations too) with the TrainJob's `trainer` applied to the replicated job labelled
  `trainer.kubeflow.org/trainjob-ancestor-step: trainer` (one replica): its container `node` gets
  `image`, `command`, `args`, `resourcesPerNode` and `env` (`env` also on the `node` replicated job's
  `node` container under MPI's `runLauncherAsNode`). Node count (`trainer.numNodes`, else the runtime's
  `mlPolicy.numNodes`) becomes `parallelism` = `completions` of the trainer's replicated job (MPI: of
  `node`, one less under `runLauncherAsNode`); every other replicated job gets its own count (1 unless
  written). `spec.suspend` is copied. Once created, the JobSet is rewritten only while it or the TrainJob
  is suspended (as upstream's `Build`).
- **ML policy env**: torch on the trainer's `node` container: `PET_NNODES`, `PET_NPROC_PER_NODE`
  (`numProcPerNode`, else `auto` becomes the CPU count of `resourcesPerNode`, at least 1, without GPUs),
  `PET_NODE_RANK` (fieldRef to the completion-index annotation), `PET_MASTER_ADDR`
  `<trainjob>-node-0-0.<trainjob>`, `PET_MASTER_PORT` 29500 (v2.3.0's `ContainerTrainerPort`) and that
  container port; JAX: `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID` (the completion index),
  `JAX_COORDINATOR_ADDRESS` `<trainjob>-node-0-0.<trainjob>:29500` and the port; only with a `spec.trainer`,
  as upstream. MPI (OpenMPI): the launcher's `node` container gets `OMPI_MCA_orte_default_hostfile`,
  `OMPI_MCA_orte_keep_fqdn_hostnames`, `OMPI_MCA_orte_set_default_slots`, `OMPI_MCA_plm_rsh_args`;
  ConfigMap `<trainjob>-mpi-hostfile` (`<host> slots=<n>` per node, the launcher first under
  `runLauncherAsNode`) and Secret `<trainjob>-mpi-ssh-auth`, both owned by the TrainJob.
- **Status**: `Complete`/`Failed` copied from the JobSet's `Completed`/`Failed` (reason, message, time),
  `jobsStatus` from its `replicatedJobsStatus`; `Suspended` True (`Suspended`, "TrainJob is suspended")
  while `spec.suspend`, then False (`Resumed`, "TrainJob is resumed"); `activeDeadlineSeconds` (from
  creation, or from the resume) fails it (`DeadlineExceeded`, "TrainJob exceeded its active deadline")
  and deletes the JobSet.
- **A missing runtime** sets no condition (as v2.3.0, kubeflow/trainer#2351): a Warning event
  `TrainJobResourcesCreationFailed` ("TrainJob resources reconciliation failed: not found
  ClusterTrainingRuntime specified in TrainJob: ..." / "TrainingRuntime specified in TrainJob is not
  found: ..."); the TrainJob is looked at again when a runtime of that name appears. A `runtimeRef` of
  another kind or group gets `Failed` `TrainingRuntimeNotSupported`.

- **`runtimePatches`** applied to the runtime's template first, in order: each patch's `template.spec`
  strategic-merged (replicated jobs by name, the runtime's order kept), its `template.metadata` labels
  and annotations added to the JobSet's. MPI's volumes: the ssh Secret on the `node` and `launcher` pods
  (mounted at `sshAuthMountPath` in their `node` container), the hostfile ConfigMap on the launcher's, at
  `/etc/mpi`.

Simplified: no initializer env, podGroupPolicy, XGBoost/Flux env or real key material, no runtime
snapshot; `managedBy` other than the default is left alone. tests/operators/test_trainer_fidelity.py holds
what it makes to what the real v2.3.0 made (tests/fixtures/real-trainer).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from localkube.controllers.builtin import (
    create_quietly,
    delete_quietly,
    get_live,
    owner_reference,
    same_type,
    served,
)
from localkube.controllers.conditions import seconds_since
from localkube.controllers.jobset import JOBSETS, defaulted, set_condition
from localkube.controllers.kubeflow import controller_ref
from localkube.controllers.loop import ReconcileLoop
from localkube.events import record_event
from localkube.patches import SMP_MERGE_KEYS, merge_patch
from localkube.resources import CONFIGMAPS, SECRETS, ResourceType
from localkube.store import ApiError, WatchEvent

if TYPE_CHECKING:
    from localkube.api import ClusterApi

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
TRAINJOBS = ResourceType(GROUP, VERSION, "trainjobs", "TrainJob", "trainjob")
TRAINING_RUNTIMES = ResourceType(GROUP, VERSION, "trainingruntimes", "TrainingRuntime", "trainingruntime")
CLUSTER_TRAINING_RUNTIMES = ResourceType(
    GROUP, VERSION, "clustertrainingruntimes", "ClusterTrainingRuntime", "clustertrainingruntime", False
)
TRAINER_TYPES = (TRAINJOBS, TRAINING_RUNTIMES, CLUSTER_TRAINING_RUNTIMES)
RUNTIME_TYPES = {"TrainingRuntime": TRAINING_RUNTIMES, "ClusterTrainingRuntime": CLUSTER_TRAINING_RUNTIMES}
NOT_FOUND = {
    "TrainingRuntime": "TrainingRuntime specified in TrainJob is not found",
    "ClusterTrainingRuntime": "not found ClusterTrainingRuntime specified in TrainJob",
}
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
NODE, LAUNCHER = "node", "launcher"
SSH_AUTH_VOLUME, HOSTFILE_VOLUME = "mpi-ssh-auth", "mpi-hostfile"
# Strategic merge keys of a JobSet spec (its replicated jobs are a map keyed by name) and the pods within.
JOBSET_MERGE_KEYS = {**SMP_MERGE_KEYS, "replicatedJobs": "name"}
TRAINER_PORT = 29500
INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
COMPONENT = "trainjob-controller"
SUSPENDED_MESSAGE, RESUMED_MESSAGE = "TrainJob is suspended", "TrainJob is resumed"
DEADLINE_MESSAGE = "TrainJob exceeded its active deadline"


class TrainJobController(ReconcileLoop):
    """Reconciles TrainJobs on their own changes, their JobSets' and their runtimes' appearance."""

    def initial_keys(self) -> list[Hashable]:
        if not (served(self.store, TRAINJOBS) and served(self.store, JOBSETS)):
            return []
        return [(j["metadata"]["namespace"], j["metadata"]["name"]) for j in self.store.list(TRAINJOBS)]

    def keys_for_event(self, event: WatchEvent) -> list[Hashable]:
        meta = event.object["metadata"]
        if same_type(event.rt, TRAINJOBS):
            return [] if event.type == "DELETED" else [(meta["namespace"], meta["name"])]
        if same_type(event.rt, JOBSETS):
            ref = controller_ref(event.object)
            if ref and ref.get("apiVersion") == TRAINJOBS.api_version and ref.get("kind") == TRAINJOBS.kind:
                return [(meta["namespace"], ref["name"])]
        if event.type == "ADDED" and any(same_type(event.rt, rt) for rt in RUNTIME_TYPES.values()):
            return [
                (j["metadata"]["namespace"], j["metadata"]["name"])
                for j in self.store.list(TRAINJOBS, meta.get("namespace") or None)
                if ((j.get("spec") or {}).get("runtimeRef") or {}).get("name") == meta["name"]
            ]
        return []

    def reconcile(self, key: Any) -> float | None:
        job = get_live(self.store, TRAINJOBS, *key)
        if job is None:
            return None
        return _TrainJob(self.store, job).sync()


class _TrainJob:
    """One reconcile of one TrainJob."""

    def __init__(self, store: ClusterApi, job: dict) -> None:
        self.store, self.job = store, job
        self.name, self.namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        self.spec = job.get("spec") or {}
        self.trainer = self.spec.get("trainer") or {}
        self.status: dict[str, Any] = copy.deepcopy(job.get("status") or {})
        self.conditions: list[dict] = self.status.get("conditions") or []
        self.suspend = bool(self.spec.get("suspend"))

    def sync(self) -> float | None:
        if (self.spec.get("managedBy") or COMPONENT_MANAGER) != COMPONENT_MANAGER:
            return None
        deadline_failed = self._condition("Failed", reason="DeadlineExceeded")
        self.conditions[:] = [c for c in self.conditions if c["type"] != "Failed" or c is deadline_failed]
        ref = self.spec.get("runtimeRef") or {}
        kind = ref.get("kind") or "ClusterTrainingRuntime"
        if (ref.get("apiGroup") or GROUP) != GROUP or kind not in RUNTIME_TYPES:
            message = f"unsupported runtime: {kind}.{ref.get('apiGroup') or GROUP}"
            set_condition(self.conditions, "Failed", "True", "TrainingRuntimeNotSupported", message)
        elif not self._finished():
            self._ensure_objects(kind, str(ref.get("name") or ""))
        self._suspended_condition()
        jobset = self._get(JOBSETS, self.name)
        if jobset is not None:
            self._copy_status(jobset)
        delay = self._deadline(jobset)
        self._write()
        return delay

    # -- objects -------------------------------------------------------------------------------------------
    def _ensure_objects(self, kind: str, name: str) -> None:
        runtime_type = RUNTIME_TYPES[kind]
        runtime = self._get(runtime_type, name, "" if kind == "ClusterTrainingRuntime" else self.namespace)
        if runtime is None:
            lookup = f'{runtime_type.plural}.{GROUP} "{name}" not found'
            message = f"TrainJob resources reconciliation failed: {NOT_FOUND[kind]}: {lookup}"
            record_event(
                self.store, self.job, "Warning", "TrainJobResourcesCreationFailed", message, COMPONENT
            )
            return
        existing = self._get(JOBSETS, self.name)
        if existing is not None and not self.suspend and not (existing.get("spec") or {}).get("suspend"):
            return
        jobset, extras = self._build(runtime.get("spec") or {})
        for rt, obj in extras:
            if self._get(rt, obj["metadata"]["name"]) is None:
                create_quietly(self.store, rt, self.namespace, obj)
        if existing is None:
            create_quietly(self.store, JOBSETS, self.namespace, jobset)
        elif existing.get("spec") != jobset["spec"]:
            self.store.patch(
                JOBSETS, self.namespace, self.name, {"spec": jobset["spec"]}, "application/merge-patch+json"
            )

    def _build(self, runtime_spec: dict) -> tuple[dict, list[tuple[ResourceType, dict]]]:
        template = self._patched(copy.deepcopy(runtime_spec.get("template") or {}))
        spec = template.get("spec") or {}
        policy = runtime_spec.get("mlPolicy") or {}
        mpi = policy.get("mpi")
        launcher_as_node = bool((mpi or {}).get("runLauncherAsNode"))
        nodes = int(self.trainer.get("numNodes") or policy.get("numNodes") or 1)
        rjobs: list[dict] = spec.get("replicatedJobs") or []
        trainer_rjob = next((r for r in rjobs if _ancestor(r) == "trainer"), None)
        counted = next((r for r in rjobs if r.get("name") == NODE), None) if mpi else trainer_rjob
        for rjob in rjobs:
            job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
            if rjob is counted:
                count = max(nodes - 1, 1) if mpi and launcher_as_node else nodes
            else:
                count = int(job_spec.get("parallelism") or 1)
            job_spec["parallelism"] = job_spec["completions"] = count
            if rjob is trainer_rjob:
                rjob["replicas"] = 1
                self._apply_trainer(rjob)
            if rjob is trainer_rjob or (launcher_as_node and rjob.get("name") == NODE):
                for container in _containers(rjob, NODE):
                    _upsert_env(container, self.trainer.get("env") or [])
        extras: list[tuple[ResourceType, dict]] = []
        has_trainer = self.spec.get("trainer") is not None  # upstream finds no trainer container without it
        for container in _containers(trainer_rjob, NODE) if trainer_rjob and has_trainer else []:
            if policy.get("torch") is not None:
                self._torch_env(container, policy["torch"], nodes)
            elif policy.get("jax") is not None:
                self._jax_env(container, nodes)
        if mpi is not None:
            extras = self._mpi(rjobs, mpi, launcher_as_node)
        spec["suspend"] = self.suspend
        spec = defaulted(spec)  # what JobSet's mutating webhook stores
        meta = template.get("metadata") or {}
        jobset = {
            "apiVersion": JOBSETS.api_version,
            "kind": JOBSETS.kind,
            "metadata": {
                "name": self.name,
                "labels": dict(meta.get("labels") or {}),
                "annotations": dict(meta.get("annotations") or {}),
                "ownerReferences": [owner_reference(self.job)],
            },
            "spec": spec,
        }
        return jobset, extras

    def _patched(self, template: dict) -> dict:
        """The runtime's JobSet template with the TrainJob's ``runtimePatches`` applied in order, as
        v2.3.0's ``mergeRuntimePatches``: each patch's ``template.spec`` strategic-merged (replicated jobs by
        name, containers, env and volumes by name, mounts by path), the runtime's replicated job order kept;
        each patch's ``template.metadata`` labels and annotations added to the JobSet's."""
        spec = template.setdefault("spec", {})
        order = {r.get("name"): i for i, r in enumerate(spec.get("replicatedJobs") or [])}
        meta = template.setdefault("metadata", {})
        for patch in self.spec.get("runtimePatches") or []:
            patch_template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
            patch_meta = patch_template.get("metadata") or {}
            for field in ("labels", "annotations"):
                if patch_meta.get(field):
                    meta[field] = {**(meta.get(field) or {}), **patch_meta[field]}
            if patch_template.get("spec"):
                spec = merge_patch(spec, patch_template["spec"], strategic=True, keys=JOBSET_MERGE_KEYS)
        spec["replicatedJobs"] = sorted(
            spec.get("replicatedJobs") or [], key=lambda r: order.get(r.get("name"), len(order))
        )
        template["spec"] = spec
        return template

    def _apply_trainer(self, rjob: dict) -> None:
        for container in _containers(rjob, NODE):
            for field in ("image", "command", "args"):
                if self.trainer.get(field) is not None:
                    container[field] = copy.deepcopy(self.trainer[field])
            if self.trainer.get("resourcesPerNode") is not None:
                container["resources"] = copy.deepcopy(self.trainer["resourcesPerNode"])

    def _torch_env(self, container: dict, torch: dict, nodes: int) -> None:
        per_node = self.trainer.get("numProcPerNode", torch.get("numProcPerNode"))
        if per_node is None or str(per_node) == "auto":
            resources = container.get("resources") or {}
            if _quantity(resources, "nvidia.com/gpu") == 0:
                per_node = max(1, math.ceil(_quantity(resources, "cpu")))
            else:
                per_node = "auto"
        _upsert_env(
            container,
            [
                {"name": "PET_NNODES", "value": str(nodes)},
                {"name": "PET_NPROC_PER_NODE", "value": str(per_node)},
                {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}},
                {"name": "PET_MASTER_ADDR", "value": f"{self.name}-{NODE}-0-0.{self.name}"},
                {"name": "PET_MASTER_PORT", "value": str(TRAINER_PORT)},
            ],
        )
        _upsert_port(container)

    def _jax_env(self, container: dict, nodes: int) -> None:
        _upsert_env(
            container,
            [
                {"name": "JAX_NUM_PROCESSES", "value": str(nodes)},
                {"name": "JAX_PROCESS_ID", "valueFrom": {"fieldRef": {"fieldPath": INDEX_FIELD}}},
                {
                    "name": "JAX_COORDINATOR_ADDRESS",
                    "value": f"{self.name}-{NODE}-0-0.{self.name}:{TRAINER_PORT}",
                },
            ],
        )
        _upsert_port(container)

    def _mpi(self, rjobs: list[dict], mpi: dict, launcher_as_node: bool) -> list[tuple[ResourceType, dict]]:
        slots = int(self.trainer.get("numProcPerNode") or mpi.get("numProcPerNode") or 1)
        hosts = [f"{self.name}-{LAUNCHER}-0-0.{self.name}"] if launcher_as_node else []
        node = next((r for r in rjobs if r.get("name") == NODE), None)
        if node is not None:
            count = int(node["template"]["spec"]["parallelism"])
            hosts += [f"{self.name}-{NODE}-0-{i}.{self.name}" for i in range(count)]
        for rjob in rjobs:
            if rjob.get("name") == LAUNCHER:
                for container in _containers(rjob, NODE):
                    _upsert_env(
                        container,
                        [
                            {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
                            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                            {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
                            {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
                        ],
                    )
        self._mpi_volumes(rjobs, str(mpi.get("sshAuthMountPath") or "/root/.ssh"))
        owned = {"ownerReferences": [owner_reference(self.job)]}
        hostfile = {
            "metadata": {"name": f"{self.name}-mpi-hostfile", **owned},
            "data": {"hostfile": "".join(f"{host} slots={slots}\n" for host in hosts)},
        }
        secret = {
            "metadata": {"name": f"{self.name}-mpi-ssh-auth", **owned},
            "type": "kubernetes.io/ssh-auth",
            "stringData": {"ssh-privatekey": "localkube: no key material", "ssh-publickey": "localkube"},
        }
        return [(CONFIGMAPS, hostfile), (SECRETS, secret)]

    def _mpi_volumes(self, rjobs: list[dict], ssh_path: str) -> None:
        """The MPI plugin's volumes: the ssh Secret on the node and launcher pods, mounted at the policy's
        ``sshAuthMountPath`` in their ``node`` container; the hostfile ConfigMap on the launcher, at
        /etc/mpi."""
        ssh_auth = {
            "name": SSH_AUTH_VOLUME,
            "secret": {
                "secretName": f"{self.name}-mpi-ssh-auth",
                "defaultMode": 0o400,
                "items": [
                    {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
                    {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
                    {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644},
                ],
            },
        }
        hostfile = {
            "name": HOSTFILE_VOLUME,
            "configMap": {
                "name": f"{self.name}-mpi-hostfile",
                "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}],
            },
        }
        for rjob in rjobs:
            name = rjob.get("name")
            if name not in (NODE, LAUNCHER):
                continue
            pod_spec = rjob["template"]["spec"].setdefault("template", {}).setdefault("spec", {})
            volumes = [ssh_auth, hostfile] if name == LAUNCHER else [ssh_auth]
            _upsert(pod_spec.setdefault("volumes", []), volumes, "name")
            mounts = [{"name": SSH_AUTH_VOLUME, "mountPath": ssh_path}]
            if name == LAUNCHER:
                mounts.append({"name": HOSTFILE_VOLUME, "mountPath": "/etc/mpi"})
            for container in _containers(rjob, NODE):
                _upsert(container.setdefault("volumeMounts", []), mounts, "name")

    # -- status --------------------------------------------------------------------------------------------
    def _finished(self) -> bool:
        return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in self.conditions)

    def _condition(self, type_: str, reason: str | None = None) -> dict | None:
        return next(
            (
                c
                for c in self.conditions
                if c["type"] == type_ and (reason is None or c.get("reason") == reason)
            ),
            None,
        )

    def _suspended_condition(self) -> None:
        suspended = self._condition("Suspended")
        if self.suspend:
            set_condition(self.conditions, "Suspended", "True", "Suspended", SUSPENDED_MESSAGE)
        elif suspended is not None and suspended["status"] == "True":
            set_condition(self.conditions, "Suspended", "False", "Resumed", RESUMED_MESSAGE)

    def _copy_status(self, jobset: dict) -> None:
        status = jobset.get("status") or {}
        for source, target in (("Completed", "Complete"), ("Failed", "Failed")):
            found = next(
                (c for c in status.get("conditions") or [] if c["type"] == source and c["status"] == "True"),
                None,
            )
            if found is not None:
                set_condition(
                    self.conditions, target, "True", found.get("reason", ""), found.get("message", "")
                )
        self.status["jobsStatus"] = [
            {k: int(entry.get(k) or 0) for k in ("ready", "succeeded", "failed", "active", "suspended")}
            | {"name": entry["name"]}
            for entry in status.get("replicatedJobsStatus") or []
        ]

    def _deadline(self, jobset: dict | None) -> float | None:
        limit = self.spec.get("activeDeadlineSeconds")
        if not limit or self._finished() or self.suspend:
            return None
        start = self.job["metadata"]["creationTimestamp"]
        resumed = self._condition("Suspended")
        if resumed is not None and resumed["status"] == "False":
            start = resumed["lastTransitionTime"]
        left = float(limit) - seconds_since(start)
        if left > 0:
            return left + 0.01
        set_condition(self.conditions, "Failed", "True", "DeadlineExceeded", DEADLINE_MESSAGE)
        if jobset is not None:
            delete_quietly(self.store, JOBSETS, jobset)
        return None

    def _write(self) -> None:
        status = {**self.status, "conditions": self.conditions}
        if not status["conditions"]:
            del status["conditions"]
        if status != (self.job.get("status") or {}):
            self.store.update_status(TRAINJOBS, self.namespace, self.name, status)

    def _get(self, rt: ResourceType, name: str, namespace: str | None = None) -> dict | None:
        try:
            return self.store.get(rt, self.namespace if namespace is None else namespace, name)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise


COMPONENT_MANAGER = "trainer.kubeflow.org/trainjob-controller"


def _ancestor(rjob: dict) -> str | None:
    return (((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}).get(ANCESTOR)


def _containers(rjob: dict, name: str) -> list[dict]:
    pod_spec = rjob["template"]["spec"].setdefault("template", {}).setdefault("spec", {})
    return [c for c in pod_spec.get("containers") or [] if c.get("name") == name]


def _upsert_env(container: dict, env: list[dict]) -> None:
    """Upstream's `apply.UpsertEnvVars` (no empty list where there was none)."""
    if env:
        _upsert(container.setdefault("env", []), env, "name")


def _upsert(current: list[dict], items: list[dict], key: str) -> None:
    """Upstream's `apply.Upsert*`: an item of the same ``key`` is replaced in place, others appended."""
    for item in items:
        at = next((i for i, e in enumerate(current) if e.get(key) == item.get(key)), None)
        if at is None:
            current.append(copy.deepcopy(item))
        else:
            current[at] = copy.deepcopy(item)


def _upsert_port(container: dict) -> None:
    """The trainer port on the container (for the headless Service), once."""
    ports = container.setdefault("ports", [])
    if not any(p.get("containerPort") == TRAINER_PORT for p in ports):
        ports.append({"containerPort": TRAINER_PORT})


def _quantity(resources: dict, name: str) -> float:
    """A resource's quantity from limits, else requests (`500m` is 0.5; binary suffixes are not needed)."""
    value = (resources.get("limits") or {}).get(name, (resources.get("requests") or {}).get(name))
    if value is None:
        return 0.0
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
