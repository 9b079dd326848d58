"""The PaddlePaddle EDL controller for `paddlepaddle.org/v1` `TrainingJob` (legacy-paddle-edl.md §4-9).

**Resource lineage** (the default; the v0.1.0 controller): when it first sees a job it creates the ReplicaSet
`<job>-master` (containers `master` + `etcd`), the ReplicaSet `<job>-pserver` and the batch Job
`<job>-trainer` (parallelism `trainer.min-instance`, no completions, `restartPolicy: Never`), with the
reference's template labels, commands (the v0.1.0 fault-tolerant swap), ports and env (`podEnv`). The
children carry no labels of their own and no ownerReferences; they are never deleted and the TrainingJob's
status is never written. `Validate()` (the defaults) is not applied either. The batch Job and ReplicaSet
controllers (`builtin.py`) make the pods.

Differences from the reference, forced by what localkube serves: the ReplicaSets are `apps/v1` (not
`extensions/v1beta1`), which needs a `spec.selector`: it is the template's labels, as the extensions
defaulting would have set it.

**Autoscaler**, simplified from `pkg/autoscaler.go`: on every job change and every `autoscale_interval`
seconds (5 as in the reference), an elastic job (min < max) whose trainer pods are all Running gains one
trainer (`spec.parallelism` + 1 on `<job>-trainer`, written with a PUT) until `max-instance`; above max it
is set back to max. localkube's node has no capacity to account for, so the resource arithmetic (idle CPU,
memory, GPUs, `max_load_desired`), the fulfillment ordering and scaling down under load are left out.

**CRD lineage** (`lineage="crd"`, or the annotation `localkube.dev/edl-lineage: crd` on the job): the same
children (the master only when `fault_tolerant`, `host_network`/`NodeSelector` applied), plus the updater's
status: lower-case `phase` (creating, running, succeeded, failed), `reason`, `replica_statuses`; once the
trainer Job decides, the pserver (and the fault-tolerant master) ReplicaSets are released.

Scripted timelines: the job's script (annotation or registered name) goes onto each child's pod template with
the steps of `trainer`, `pserver` or `master` folded into `default` (pods carry no replica-type label and
their owner chain ends at the child).
"""

from __future__ import annotations

import asyncio
import copy
import math
from collections.abc import Hashable
from typing import Any

from localkube.controllers.builtin import (
    create_quietly,
    delete_quietly,
    folded_script,
    get_live,
    with_script,
)
from localkube.controllers.kubeflow import phase
from localkube.controllers.loop import ReconcileLoop
from localkube.resources import BATCH_JOBS, PODS, REPLICASETS, ResourceType
from localkube.store import ApiError, WatchEvent

GROUP, VERSION, PLURAL = "paddlepaddle.org", "v1", "trainingjobs"
LINEAGE_ANNOTATION = "localkube.dev/edl-lineage"
TRAINER, PSERVER, MASTER = "trainer", "pserver", "master"
LABELS = {TRAINER: "paddle-job", PSERVER: "paddle-job-pserver", MASTER: "paddle-job-master"}
GPU = "alpha.kubernetes.io/nvidia-gpu"  # what Kubernetes 1.8's NvidiaGPU() reads
ETCD_IMAGE = "quay.io/coreos/etcd:v3.2.1"
ETCD_COMMAND = [
    "etcd",
    "-name",
    "etcd0",
    "-advertise-client-urls",
    "http://$(POD_IP):2379,http://$(POD_IP):4001",
    "-listen-client-urls",
    "http://0.0.0.0:2379,http://0.0.0.0:4001",
    "-initial-advertise-peer-urls",
    "http://$(POD_IP):2380",
    "-listen-peer-urls",
    "http://0.0.0.0:2380",
    "-initial-cluster",
    "etcd0=http://$(POD_IP):2380",
    "-initial-cluster-state",
    "new",
]
AUTOSCALE_INTERVAL = 5.0
UPDATE_RETRIES = 5
_SCALE = ("autoscale",)


def field(obj: dict, key: str) -> Any:
    """A key as Go's JSON decoding finds it: the exact spelling first, then any case (`HostNetwork`)."""
    if key in obj:
        return obj[key]
    return next((v for k, v in obj.items() if k.lower() == key.lower()), None)


def quantity(value: Any) -> float:
    """A CPU or count quantity (`200m`, `2`, `0.5`) as a number of units."""
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


class EdlJob:
    """A TrainingJob's spec read as the controller reads it (zero values for what is missing)."""

    def __init__(self, job: dict, crd: bool) -> None:
        self.raw, self.crd = job, crd
        self.name: str = job["metadata"]["name"]
        self.namespace: str = job["metadata"]["namespace"]
        self.spec: dict = job.get("spec") or {}
        self.trainer: dict = field(self.spec, "trainer") or {}
        self.pserver: dict = field(self.spec, "pserver") or {}
        self.master: dict = field(self.spec, "master") or {}

    def number(self, section: dict, key: str) -> int:
        return int(field(section, key) or 0)

    @property
    def fault_tolerant(self) -> bool:
        return bool(field(self.spec, "fault_tolerant"))

    @property
    def elastic(self) -> bool:
        return self.number(self.trainer, "min-instance") < self.number(self.trainer, "max-instance")

    def gpus(self) -> int:
        limits = (self.trainer.get("resources") or {}).get("limits") or {}
        return int(quantity(limits.get(GPU, 0)))

    def trainer_count(self) -> int:
        """PADDLE_INIT_TRAINER_COUNT: the GPU request if GPUs are limited, else the CPU request rounded up."""
        requests = (self.trainer.get("resources") or {}).get("requests") or {}
        return math.ceil(quantity(requests.get(GPU if self.gpus() > 0 else "cpu", 0)))

    def env(self) -> list[dict]:
        """`podEnv(job)`: the trainer, pserver and etcd containers' env."""
        spec, trainer = self.spec, self.trainer
        values: dict[str, object] = {
            "PADDLE_JOB_NAME": self.name,
            "TRAINERS": self.number(trainer, "min-instance"),
            "PSERVERS": self.number(self.pserver, "min-instance"),
            "ENTRY": field(trainer, "entrypoint") or "",
            "TOPOLOGY": field(trainer, "entrypoint") or "",
            "TRAINER_PACKAGE": field(trainer, "workspace") or "",
            "PADDLE_INIT_PORT": self.number(spec, "port"),
            "PADDLE_INIT_TRAINER_COUNT": self.trainer_count(),
            "PADDLE_INIT_PORTS_NUM": self.number(spec, "ports_num"),
            "PADDLE_INIT_PORTS_NUM_FOR_SPARSE": self.number(spec, "ports_num_for_sparse"),
            "PADDLE_INIT_NUM_GRADIENT_SERVERS": self.number(trainer, "min-instance"),
            "PADDLE_INIT_NUM_PASSES": self.number(spec, "passes"),
            "PADDLE_INIT_USE_GPU": "1" if self.gpus() > 0 else "0",
            "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
        }
        env: list[dict] = [{"name": k, "value": str(v)} for k, v in values.items()]
        for name, path in (("NAMESPACE", "metadata.namespace"), ("POD_IP", "status.podIP")):
            env.append({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
        return env

    def ports(self) -> list[dict]:
        port = self.number(self.spec, "port")
        count = self.number(self.spec, "ports_num") + self.number(self.spec, "ports_num_for_sparse")
        return [{"name": f"jobport-{port + i}", "containerPort": port + i} for i in range(count)]

    def pod_spec(self, containers: list[dict], **extra: Any) -> dict:
        """The pod-level fields every child shares: volumes, imagePullSecrets, hostNetwork (nulls omitted)."""
        host_network = field(self.spec, "host_network" if self.crd else "HostNetwork")
        node_selector = self.spec.get("NodeSelector") if self.crd else None
        pod = {
            **extra,
            "volumes": field(self.spec, "volumes"),
            "imagePullSecrets": field(self.spec, "imagePullSecrets"),
            "hostNetwork": bool(host_network) or None,
            "nodeSelector": node_selector,
            "containers": containers,
        }
        return {k: v for k, v in pod.items() if v is not None}

    def template(self, rtype: str, pod_spec: dict) -> dict:
        template = {"metadata": {"labels": {LABELS[rtype]: self.name}}, "spec": pod_spec}
        return with_script(template, folded_script(self.raw, [rtype]))

    def _replica_set(self, rtype: str, replicas: int, pod_spec: dict) -> dict:
        template = self.template(rtype, pod_spec)
        return {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": f"{self.name}-{rtype}", "namespace": self.namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": dict(template["metadata"]["labels"])},
                "template": template,
            },
        }

    def master_set(self) -> dict:
        master = {
            "name": "master",
            "image": field(self.spec, "image") or "",
            "imagePullPolicy": "Always",
            "command": ["paddle_k8s", "start_master"],
            "ports": [
                {"name": "master-port", "containerPort": 8080},
                {"name": "etcd-port", "containerPort": 2379},
            ],
            "volumeMounts": field(self.spec, "VolumeMounts"),
            "resources": field(self.master, "resources"),
        }
        etcd = {"name": "etcd", "image": ETCD_IMAGE, "imagePullPolicy": "Always", "env": self.env()}
        etcd["command"] = list(ETCD_COMMAND)
        return self._replica_set(MASTER, 1, self.pod_spec([_compact(master), etcd]))

    def pserver_set(self) -> dict:
        command = "start_new_pserver" if self.fault_tolerant else "start_pserver"
        pserver = {
            "name": "pserver",
            "image": field(self.spec, "image") or "",
            "command": ["paddle_k8s", command],
            "ports": self.ports(),
            "env": self.env(),
            "resources": field(self.pserver, "resources"),
        }
        replicas = self.number(self.pserver, "min-instance")
        return self._replica_set(PSERVER, replicas, self.pod_spec([_compact(pserver)]))

    def trainer_job(self) -> dict:
        command = (
            ["paddle_k8s", "start_new_trainer"]
            if self.fault_tolerant
            else ["paddle_k8s", "start_trainer", "v2"]
        )
        trainer = {
            "name": "trainer",
            "image": field(self.spec, "image") or "",
            "imagePullPolicy": "Always",
            "command": command,
            "volumeMounts": field(self.spec, "VolumeMounts"),
            "ports": self.ports(),
            "env": self.env(),
            "resources": field(self.trainer, "resources"),
        }
        pod_spec = self.pod_spec([_compact(trainer)], restartPolicy="Never")
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{self.name}-trainer", "namespace": self.namespace},
            "spec": {
                "parallelism": self.number(self.trainer, "min-instance"),
                "template": self.template(TRAINER, pod_spec),
            },
        }


def _compact(container: dict) -> dict:
    return {k: v for k, v in container.items() if v is not None}


class PaddleEdlController(ReconcileLoop):
    """Creates each TrainingJob's children once, scales elastic trainers, and (CRD lineage) writes status."""

    def __init__(self, *, lineage: str = "resource", autoscale_interval: float = AUTOSCALE_INTERVAL) -> None:
        super().__init__()
        if lineage not in ("resource", "crd"):
            raise ValueError(f"unknown EDL lineage {lineage!r}: expected 'resource' or 'crd'")
        self.lineage = lineage
        self.autoscale_interval = autoscale_interval
        self.added: set[str] = set()  # uids of the jobs whose children were created (the informer's add)
        self.rt: ResourceType

    async def run(self, cluster: Any) -> None:
        self.rt = cluster.store.resource_type(GROUP, VERSION, PLURAL)
        ticker = asyncio.create_task(self._tick())
        try:
            await super().run(cluster)
        finally:
            ticker.cancel()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.autoscale_interval)
            self.enqueue(_SCALE)

    def is_crd(self, job: dict) -> bool:
        chosen = (job["metadata"].get("annotations") or {}).get(LINEAGE_ANNOTATION, self.lineage)
        return chosen == "crd"

    # -- event mapping -------------------------------------------------------------------------------------
    def initial_keys(self) -> list[Hashable]:
        return [("job", j["metadata"]["namespace"], j["metadata"]["name"]) for j in self.store.list(self.rt)]

    def keys_for_event(self, event: WatchEvent) -> list[Hashable]:
        meta = event.object["metadata"]
        if event.rt == self.rt:
            if event.type == "DELETED":  # onDelete: the autoscaler forgets the job; children stay
                self.added.discard(meta["uid"])
                return []
            return [("job", meta["namespace"], meta["name"]), _SCALE]
        if event.rt == BATCH_JOBS and meta["name"].endswith("-trainer"):
            return [("job", meta["namespace"], meta["name"].removesuffix("-trainer"))]
        if event.rt == PODS:
            labels = meta.get("labels") or {}
            return [("job", meta["namespace"], labels[k]) for k in LABELS.values() if k in labels]
        return []

    # -- reconcile -----------------------------------------------------------------------------------------
    def reconcile(self, key: Any) -> float | None:
        if key == _SCALE:
            self.autoscale()
            return None
        _, namespace, name = key
        job = get_live(self.store, self.rt, namespace, name)
        if job is None:
            return None
        crd = self.is_crd(job)
        edl = EdlJob(job, crd)
        if job["metadata"]["uid"] not in self.added:
            self.added.add(job["metadata"]["uid"])
            self.create_children(edl)
        if crd:
            Updater(self, edl).run()
        return None

    def create_children(self, edl: EdlJob) -> None:
        """`onAdd`: master (CRD lineage: only when fault-tolerant), pserver, trainer; existing ones stay."""
        if not edl.crd or edl.fault_tolerant:
            create_quietly(self.store, REPLICASETS, edl.namespace, edl.master_set())
        create_quietly(self.store, REPLICASETS, edl.namespace, edl.pserver_set())
        create_quietly(self.store, BATCH_JOBS, edl.namespace, edl.trainer_job())

    # -- autoscaler ----------------------------------------------------------------------------------------
    def autoscale(self) -> None:
        for job in self.store.list(self.rt):
            edl = EdlJob(job, self.is_crd(job))
            if not edl.elastic:
                continue
            try:
                trainer = self.store.get(BATCH_JOBS, edl.namespace, f"{edl.name}-trainer")
            except ApiError:
                continue  # "will sync later"
            if (trainer.get("status") or {}).get("conditions"):
                continue  # finished
            current = int((trainer.get("spec") or {}).get("parallelism") or 0)
            target = self._target(edl, current)
            if target != current:
                self._set_parallelism(edl, target)

    def _target(self, edl: EdlJob, current: int) -> int:
        maximum = edl.number(edl.trainer, "max-instance")
        if current >= maximum:
            return maximum
        pods = [
            p
            for p in self.store.list(PODS, edl.namespace, label_selector=f"{LABELS[TRAINER]}={edl.name}")
            if not p["metadata"].get("deletionTimestamp")
        ]
        running = [p for p in pods if phase(p) == "Running"]
        return current + 1 if pods and len(running) == len(pods) == current else current

    def _set_parallelism(self, edl: EdlJob, target: int) -> None:
        """GET the trainer Job, set `spec.parallelism` and PUT it, retrying conflicts up to 5 times."""
        name = f"{edl.name}-trainer"
        for _ in range(UPDATE_RETRIES):
            trainer = self.store.get(BATCH_JOBS, edl.namespace, name)
            trainer["spec"]["parallelism"] = target
            try:
                self.store.replace(BATCH_JOBS, edl.namespace, name, trainer)
                return
            except ApiError as exc:
                if exc.code != 409:
                    raise


class Updater:
    """The CRD lineage's `pkg/updater`: the job's status from its trainer Job and pods."""

    def __init__(self, controller: PaddleEdlController, edl: EdlJob) -> None:
        self.controller, self.edl = controller, edl
        self.store = controller.store

    def pods(self, rtype: str) -> list[dict]:
        selector = f"{LABELS[rtype]}={self.edl.name}"
        return self.store.list(PODS, self.edl.namespace, label_selector=selector)

    def run(self) -> None:
        edl = self.edl
        status = copy.deepcopy(edl.raw.get("status") or {})
        if status.get("phase") in ("succeeded", "failed"):
            return
        try:
            trainer = self.store.get(BATCH_JOBS, edl.namespace, f"{edl.name}-trainer")
        except ApiError as exc:
            if exc.code != 404:
                raise
            status.update(
                phase="failed", reason="Internal error; create trainer error: trainer Job is missing"
            )
            self._write(status)
            return
        counts = {
            k: int((trainer.get("status") or {}).get(k) or 0) for k in ("active", "succeeded", "failed")
        }
        parallelism = int((trainer.get("spec") or {}).get("parallelism") or 0)
        outcome = self._outcome(counts, parallelism)
        trainer_pods = self.pods(TRAINER)
        if outcome is not None:
            status["phase"], status["reason"] = outcome
            self._release()
        else:
            running = any(phase(p) == "Running" for p in trainer_pods)
            status.update(phase="running" if running else "creating", reason="")
        status["scale_status"] = status.get("scale_status") or {}
        status["replica_statuses"] = [
            self._replica_status(rtype)
            for rtype in (MASTER, PSERVER, TRAINER)
            if rtype != MASTER or edl.fault_tolerant
        ]
        self._write(status)

    def _outcome(self, counts: dict[str, int], parallelism: int) -> tuple[str, str] | None:
        if self.edl.fault_tolerant:
            if counts["failed"] == parallelism:
                return "failed", "all trainer have failed!"
            if counts["succeeded"] != 0 and counts["active"] == 0:
                return "succeeded", "Success!"
            return None
        if counts["failed"] != 0:
            return "failed", "at least one trainer failed!"
        if counts["succeeded"] == parallelism and counts["active"] == 0:
            return "succeeded", "all trainer have succeeded!"
        return None

    def _replica_status(self, rtype: str) -> dict:
        states: dict[str, int] = {}
        for pod in self.pods(rtype):
            state = {"Pending": "starting"}.get(phase(pod), phase(pod).lower())
            states[state] = states.get(state, 0) + 1
        if not states:
            state = ""
        elif len(states) == 1:
            state = next(iter(states))
        else:
            state = "failed" if "failed" in states else "running" if "running" in states else "starting"
        return {"training_resource_type": rtype.upper(), "state": state, "resource_states": states}

    def _release(self) -> None:
        """A finished job frees the pserver ReplicaSet and, when fault-tolerant, the master."""
        edl = self.edl
        for rtype in (PSERVER, MASTER) if edl.fault_tolerant else (PSERVER,):
            delete_quietly(
                self.store,
                REPLICASETS,
                {"metadata": {"namespace": edl.namespace, "name": f"{edl.name}-{rtype}"}},
            )

    def _write(self, status: dict) -> None:
        if status != (self.edl.raw.get("status") or {}):
            self.store.update_status(self.controller.rt, self.edl.namespace, self.edl.name, status)
