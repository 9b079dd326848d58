"""``scale.py --server real``: status change to trigger event against a real kube-apiserver and etcd.

localkube's server runs in the benchmark's process, on one Python thread shared with its Kubeflow controller
and pod runtime; when 100 jobs a second end at N = 1,000 it falls 30-35 s behind before it even writes the
watch event, so its figure measures the test server. Here the API server is the real one the repository's
real tier runs (``scripts/realkube/build.sh``: kube-apiserver v1.37.2, etcd v3.7.3, kube-controller-manager;
``localkube.realcluster.RealCluster``), with ``localkube agent`` (another process) as the Kubeflow controller
and the kubelet, as in ``make test-real``.

Each job's replicas log a line, then wait at a gate named after the job (the scripted runtime's ``gate``) and
stay Running. The flip is the status write a training operator makes: the benchmark PATCHes the job's
``status`` subresource to Succeeded (the conditions a Kubeflow operator writes, as localkube's controller
would), stamping ``time.perf_counter()`` (CLOCK_MONOTONIC, the trigger process's clock too) just before the
request is sent; then it opens the job's gate over the API (a ConfigMap the agent's ``gates`` controller
reads), so the replicas exit 0 right after, as a worker that outlives its master would. A thread of the
benchmark keeps a plain watch on the jobs and stamps when each terminal event arrives: ``write->observed``
is the real server's fan-out as any watch client sees it, ``observed->event`` about the provider's share.

``--end replicas`` ends each job as a Kubeflow operator does: the benchmark opens the gates only, the replicas
exit 0, and the agent's controller writes Succeeded once the Master's pod ended (``write`` is then the gate's
write, and ``observed->event`` the figure: the cluster's own time to write the status is not the provider's).
With logs, the trigger process also reports each job's ``ReplicaLogStreamer.stop()`` (the final reads the
waiter awaits before the event), and the CPU each process used over the flips is read from ``/proc``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import ssl
import threading
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localkube.controllers import conditions as cond
from localkube.realcluster import RealCluster
from scale_manifest import job_manifest
from trigger_load import KIND, NAMESPACE, terminal

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BIN = Path.home() / ".cache/airflow-provider-training/k8s/v1.37.2-etcdv3.7.3/bin"
CRD = ROOT / "tests/fixtures/crds/kubeflow.org-v1/pytorchjobs.yaml"
AGENT_ARGS = ("--runtime", "scripted", "--controllers", "kubeflow,gates")
JOBS_PATH = (
    f"/apis/{KIND.resource.group}/{KIND.resource.version}/namespaces/{NAMESPACE}/{KIND.resource.plural}"
)
GATES_LABEL = "localkube.dev/gates"
WRITERS = 4
# Without the Endpoints and EndpointSlice controllers: for the jobs' 2N Services (a PyTorchJob has one per
# replica) they kept writing at their client's limit (20 requests/s), then updated Endpoints and patched an
# event some 25 times a second for 50 jobs without end (not diagnosed), into the flips. Nothing here reads
# Endpoints. The client limit raised too, so the rest of its start-up backlog is done before the flips.
CONTROLLER_MANAGER_ARGS = (
    "--controllers=-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller",
    "--kube-api-qps=500",
    "--kube-api-burst=1000",
)
QUIET_RATE = 10.0


def bin_dir() -> Path:
    """The real tier's binaries: ``$REALKUBE_BIN``, else build.sh's default cache directory."""
    found = Path(os.environ.get("REALKUBE_BIN") or DEFAULT_BIN)
    if not (found / "kube-apiserver").exists():
        raise SystemExit(
            f"--server real needs kube-apiserver and etcd in {found}: run scripts/realkube/build.sh "
            "(or set REALKUBE_BIN)"
        )
    return found


def real_job(name: str) -> dict[str, Any]:
    """``job_manifest``, its replicas scripted to log a line and wait at the gate ``end-<name>``."""
    job = job_manifest(name)
    script = {"default": {"logs": ["step 1 loss 1.0000"], "gate": f"end-{name}", "exit_code": 0}}
    job["metadata"]["annotations"] = {"localkube.dev/script": json.dumps(script)}
    return job


class Api:
    """One keep-alive HTTPS connection to kube-apiserver as the cluster's admin (one per thread)."""

    def __init__(self, cluster: RealCluster) -> None:
        url = urllib.parse.urlsplit(cluster.url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 443
        self.context = ssl.create_default_context(cafile=str(cluster.certs["ca"]))
        self.token = cluster._token
        self.conn = self._connect()

    def _connect(self, timeout: float = 60.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout)

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, data, headers)
                response = self.conn.getresponse()
                payload = response.read()
                break
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = self._connect()
                if attempt:
                    raise
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {payload[:300]!r}")
        return dict(json.loads(payload))

    def close(self) -> None:
        self.conn.close()


class Observer:
    """A plain watch on the jobs (its own connection, a thread): the latest of each job, and when each
    one's terminal event arrived (``perf_counter``)."""

    def __init__(self, cluster: RealCluster) -> None:
        self.api = Api(cluster)
        self.jobs: dict[str, dict[str, Any]] = {}
        self.observed: dict[str, float] = {}
        self.lock = threading.Lock()
        self._stop = False
        listed = self.api.call("GET", JOBS_PATH)
        for job in listed["items"]:
            self.jobs[job["metadata"]["name"]] = job
        self.rv = listed["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        while not self._stop:
            conn = self.api._connect(timeout=3600)
            path = f"{JOBS_PATH}?watch=1&allowWatchBookmarks=true&resourceVersion={self.rv}"
            conn.request("GET", path, headers={"Authorization": f"Bearer {self.api.token}"})
            response = conn.getresponse()
            try:
                while not self._stop:
                    line = response.readline()
                    if not line:
                        break
                    event = json.loads(line)
                    obj = event["object"]
                    self.rv = obj.get("metadata", {}).get("resourceVersion", self.rv)
                    if event["type"] in ("BOOKMARK", "ERROR"):
                        continue
                    name = obj["metadata"]["name"]
                    with self.lock:
                        self.jobs[name] = obj
                        if name not in self.observed and terminal(obj):
                            self.observed[name] = time.perf_counter()
            except (OSError, http.client.HTTPException, ValueError):
                pass
            finally:
                conn.close()

    def running(self) -> int:
        with self.lock:
            return sum(1 for job in self.jobs.values() if cond.is_true(job.get("status") or {}, cond.RUNNING))

    def job(self, name: str) -> dict[str, Any]:
        with self.lock:
            return self.jobs[name]

    def stop(self) -> None:
        self._stop = True
        self.api.close()


def succeeded(status: dict[str, Any], name: str) -> dict[str, Any]:
    """The job's status as a Kubeflow operator writes it once the job succeeded (localkube's rules)."""
    status = json.loads(json.dumps(status))
    cond.finish(
        status, cond.SUCCEEDED, f"{KIND.kind}Succeeded", f"{KIND.kind} {name} is successfully completed."
    )
    for counters in (status.get("replicaStatuses") or {}).values():
        counters["succeeded"] = counters.get("succeeded", 0) + counters.get("active", 0)
        counters.pop("active", None)
    return status


@dataclass
class Flip:
    written: dict[str, float] = field(default_factory=dict)  # just before the status PATCH was sent
    answered: dict[str, float] = field(default_factory=dict)  # its response read
    behind_s: float = 0.0  # how far the writes fell behind the schedule, at most


class RealServer:
    """The control plane, the agent and what ``scale.py`` asks of them."""

    def __init__(self, workdir: Path) -> None:
        crds = workdir / "crds"
        (crds / CRD.parent.name).mkdir(parents=True)
        shutil.copy(CRD, crds / CRD.parent.name / CRD.name)
        self.cluster = RealCluster(
            bin_dir=bin_dir(),
            directory=workdir / "realkube",
            crd_dir=crds,
            agent_args=AGENT_ARGS,
            controller_manager_args=CONTROLLER_MANAGER_ARGS,
        )
        self.cluster.start()
        self.api = Api(self.cluster)
        self.kubeconfig: Path = self.cluster.kubeconfig
        self.version = self.cluster.version

    def create_jobs(self, names: list[str]) -> None:
        for name in names:
            self.api.call("POST", JOBS_PATH, real_job(name))

    def delete_jobs(self) -> None:
        """Every job (and, by the agent's controller and the garbage collector, their pods) and gate
        ConfigMap, so that the next measurement starts from an empty namespace."""
        self.api.call("DELETE", f"{JOBS_PATH}?propagationPolicy=Background")
        self.api.call(
            "DELETE", f"/api/v1/namespaces/{NAMESPACE}/configmaps?labelSelector={GATES_LABEL}%3Dopen"
        )

    def pods(self) -> int:
        return len(self.api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"])

    def flip(self, observer: Observer, names: list[str], rate: float, *, end: str = "status") -> Flip:
        """Each job's Succeeded status, ``rate`` jobs a second in batches every 0.1 s, then its gate. The
        writes of a batch go out at once over ``WRITERS`` connections (one PATCH takes 20-30 ms here, so one
        connection would fall behind 100 a second).

        ``end="replicas"``: no status write; each batch's gate only (``written`` is when its ConfigMap was
        sent), so the replicas exit 0 and the agent's controller writes Succeeded once the Master's pod has
        ended, as Kubeflow's training operator does."""
        result = Flip()
        per_tick = max(1, round(rate / 10))
        local = threading.local()

        def write(name: str) -> None:
            api = getattr(local, "api", None)
            if api is None:
                api = local.api = Api(self.cluster)
            status = succeeded(observer.job(name).get("status") or {}, name)
            result.written[name] = time.perf_counter()
            api.call(
                "PATCH", f"{JOBS_PATH}/{name}/status", {"status": status}, "application/merge-patch+json"
            )
            result.answered[name] = time.perf_counter()

        start = time.perf_counter()
        with ThreadPoolExecutor(WRITERS) as pool:
            for tick, i in enumerate(range(0, len(names), per_tick)):
                due = start + tick * 0.1
                if (ahead := due - time.perf_counter()) > 0:
                    time.sleep(ahead)
                result.behind_s = max(result.behind_s, time.perf_counter() - due)
                batch = names[i : i + per_tick]
                if end == "status":
                    list(pool.map(write, batch))
                else:
                    opened = time.perf_counter()
                    result.written.update(dict.fromkeys(batch, opened))
                gates = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"end-{tick}", "labels": {GATES_LABEL: "open"}},
                    "data": {f"end-{name}": "" for name in batch},
                }
                self.api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps", gates)
                if end != "status":
                    result.answered.update(dict.fromkeys(batch, time.perf_counter()))
        return result

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system, s) each process of the cluster has used so far: etcd, kube-apiserver,
        kube-controller-manager, the agent."""
        return {name: process_cpu_seconds(process.pid) for name, process in self.cluster._processes.items()}

    def _metrics(self, name: str) -> list[tuple[dict[str, str], float]]:
        conn = self.api._connect()
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {self.api.token}"})
        text = conn.getresponse().read().decode()
        conn.close()
        found = []
        for line in text.splitlines():
            if line.startswith(name + "{"):
                labels, _, value = line[len(name) + 1 :].rpartition("} ")
                pairs = (item.split("=", 1) for item in labels.split('",') if "=" in item)
                found.append(({k: v.strip('"') for k, v in pairs}, float(value)))
        return found

    def longrunning(self, resource: str, subresource: str = "") -> int:
        """The requests on ``resource`` (and ``subresource``: ``log`` for log streams) kube-apiserver is
        serving now: watches, followed logs (its ``apiserver_longrunning_requests`` gauge)."""
        return int(
            sum(
                value
                for labels, value in self._metrics("apiserver_longrunning_requests")
                if labels.get("resource") == resource and labels.get("subresource", "") == subresource
            )
        )

    def requests(self) -> Counter[str]:
        """Requests kube-apiserver has answered, by verb and resource (``apiserver_request_total``)."""
        counts: Counter[str] = Counter()
        for labels, value in self._metrics("apiserver_request_total"):
            resource = labels.get("resource", "") + (
                f"/{labels['subresource']}" if labels.get("subresource") else ""
            )
            counts[f"{labels.get('verb')} {resource}"] += int(value)
        return counts

    def wait_quiet(self, timeout: float, rate: float = QUIET_RATE, span: int = 3) -> float | None:
        """Until kube-apiserver answered fewer than ``rate`` requests a second for ``span`` seconds in a
        row (the set-up's backlog done: kube-controller-manager's Endpoints and EndpointSlices for the jobs'
        Services, the agent's pod writes); the seconds waited, None if it was not within ``timeout``."""
        began = time.monotonic()
        quiet, last = 0, sum(self.requests().values())
        while quiet < span:
            if time.monotonic() - began > timeout:
                return None
            time.sleep(1.0)
            total = sum(self.requests().values())
            quiet = quiet + 1 if total - last < rate else 0
            last = total
        return time.monotonic() - began

    def stop(self) -> None:
        self.api.close()
        self.cluster.stop()


def process_cpu_seconds(pid: int) -> float:
    """``utime + stime`` of ``pid`` from ``/proc/<pid>/stat``, in seconds (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        default="localkube",
        choices=("localkube", "real"),
        help="localkube (default: every figure), or real: status change to event only, on kube-apiserver "
        "and etcd (scripts/realkube/build.sh; $REALKUBE_BIN)",
    )
    parser.add_argument(
        "--quiet-timeout",
        type=float,
        default=180.0,
        help="real server: longest wait for the set-up's requests to die down before the flips, s (180)",
    )
    parser.add_argument(
        "--end",
        default="status",
        choices=("status", "replicas"),
        help="real server: how a job ends. status (default): its Succeeded status is PATCHed, then the "
        "replicas exit; replicas: the replicas exit and the agent's controller writes Succeeded once the "
        "Master ended, as Kubeflow's training operator does (the figure is then observed->event)",
    )
