"""`localkube agent`: localkube's controllers and kubelet against an existing Kubernetes API server.

The agent runs the same controllers and pod runtime as an in-process `LocalKube`, on a `RemoteApi` (LIST+WATCH
mirror, writes over HTTP) instead of the store. As a kubelet it registers a Node (Ready, InternalIP, the
kubelet endpoint's port), takes the pods nobody scheduled (binding them through pods/{name}/binding) and the
pods bound to its node, writes their status through pods/{name}/status and events through the events API,
and serves their logs over HTTPS at /containerLogs/... for the API server to proxy `pods/log` to.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import platform
import ssl
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from localkube.api import supervise
from localkube.podlogs import PodLogs
from localkube.remote import RemoteApi
from localkube.resources import (
    BATCH_JOBS,
    CONFIGMAPS,
    EVENTS,
    NODES,
    PODS,
    REPLICASETS,
    SECRETS,
    SERVICES,
    VERSION,
    ResourceType,
)
from localkube.store import ApiError, now_rfc3339

log = logging.getLogger(__name__)

DEFAULT_NODE = "localkube-agent"
# How often the kubelet renews its node's Lease and posts its Node's status (a real kubelet: 10 s each): a
# kube-controller-manager's node lifecycle controller marks a node silent for --node-monitor-grace-period
# (40-50 s) NotReady (Unknown), taints it node.kubernetes.io/unreachable and evicts its pods.
HEARTBEAT_SECONDS = 10.0
LEASE_SECONDS = 40  # the Lease's leaseDurationSeconds, as a kubelet's (4 renewals)
LEASE_NAMESPACE = "kube-node-lease"
STOP_SECONDS = 10.0  # the longest wait for the kubelet endpoint's thread to start or stop serving
MERGE_PATCH = "application/merge-patch+json"
LEASES = ResourceType(
    "coordination.k8s.io", "v1", "leases", "Lease", "lease", subresources=frozenset(), builtin=True
)
# What the kubelet and every controller read besides the controllers' own custom resources.
BASE_TYPES: tuple[ResourceType, ...] = (PODS, SERVICES, CONFIGMAPS, SECRETS, EVENTS, BATCH_JOBS, REPLICASETS)


class Agent:
    """Controllers and a kubelet on an API server reached through a kubeconfig. `await start()`, `stop()`.

    `runtime`: "process" | "scripted" | None (no kubelet); `controllers`: names from
    `localkube.controllers.CONTROLLER_NAMES`; `address`: the node's InternalIP, where its kubelet endpoint
    listens (`kubelet_port` 0: a free port).
    """

    def __init__(
        self,
        kubeconfig: str | Path | None,
        *,
        runtime: str | None = "process",
        controllers: Sequence[str] = (),
        node_name: str = DEFAULT_NODE,
        address: str = "127.0.0.1",
        kubelet_port: int = 0,
        context: str | None = None,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        node_status_seconds: float | None = None,
        client_ca_file: str | Path | None = None,
    ) -> None:
        from localkube.controllers import custom_types_of

        self.runtime = None if runtime in (None, "none") else runtime
        self.controller_names = list(controllers)
        self.node_name, self.address, self.kubelet_port = node_name, address, kubelet_port
        self.heartbeat_seconds = heartbeat_seconds
        self.node_status_seconds = heartbeat_seconds if node_status_seconds is None else node_status_seconds
        self.client_ca_file = client_ca_file
        self._ready_since = ""
        self._node_uid = ""
        self._leases = False  # whether the server serves Leases (known once the node registered)
        self.lease_renewals = 0  # how many times the Lease was written
        types = [*BASE_TYPES, *custom_types_of(self.controller_names)]
        self.api = RemoteApi.from_kubeconfig(kubeconfig, types, context=context)
        self.logs = PodLogs()
        self.task_errors: list[BaseException] = []
        self.kubelet: Any = None  # the pod runtime, once started
        self._tasks: list[asyncio.Task] = []
        self._kubelet_server: KubeletServer | None = None

    @property
    def store(self) -> RemoteApi:
        """The API the controllers and the kubelet use (the name `LocalKube` gives its store)."""
        return self.api

    @property
    def kubelet_url(self) -> str:
        return f"https://{self.address}:{self.kubelet_port}"

    async def start(self) -> None:
        from localkube.controllers import controllers_named

        await asyncio.to_thread(self.api.sync)
        self.api.start(asyncio.get_running_loop())
        workers: list[Any] = list(controllers_named(self.controller_names))
        if self.runtime is not None:
            from localkube.runtime import make_runtime

            await self._serve_kubelet()
            self.register_node()
            self.recover_pods()
            self.kubelet = make_runtime(self.runtime)
            self.kubelet.node_name, self.kubelet.own_node_only = self.node_name, True
            workers.append(self.kubelet)
        self._tasks = [asyncio.create_task(supervise(w, self, self.task_errors)) for w in workers]
        if self.runtime is not None:
            self._tasks.append(asyncio.create_task(self._heartbeat()))

    async def _heartbeat(self) -> None:
        """Renew the node's Lease every `heartbeat_seconds` and post the Node's status (Ready) every
        `node_status_seconds`, as a kubelet does; a failed beat is logged and the next one tries again."""
        posted = time.monotonic()
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            if self._leases:
                self._leases = self._renew_lease()
            if time.monotonic() - posted >= self.node_status_seconds:
                try:
                    self.api.update_status(NODES, "", self.node_name, self._node_status())
                    posted = time.monotonic()
                except Exception as exc:
                    log.warning("localkube agent: the Node's status could not be posted: %s", exc)

    def _renew_lease(self) -> bool:
        """Write the Lease `kube-node-lease/<node>`: holder the node, renewed now. False if the server does
        not serve Leases (localkube's server): then the Node's status is the only heartbeat."""
        spec = {
            "holderIdentity": self.node_name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        try:
            self._write_lease(spec)
        except ApiError as exc:
            if exc.code == 404:
                log.info("localkube agent: no Lease API (%s); the Node's status is the heartbeat", exc)
                return False
            log.warning("localkube agent: the node's Lease could not be renewed: %s", exc)
        except Exception as exc:  # the next beat tries again, as a kubelet's does
            log.warning("localkube agent: the node's Lease could not be renewed: %s", exc)
        else:
            self.lease_renewals += 1
        return True

    def _write_lease(self, spec: dict) -> None:
        """Patch the Lease's spec, or create the Lease owned by the Node (deleting the Node deletes it)."""
        try:
            self.api.patch(LEASES, LEASE_NAMESPACE, self.node_name, {"spec": spec}, MERGE_PATCH)
        except ApiError as exc:
            if exc.code != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self._node_uid}
            lease = {"metadata": {"name": self.node_name, "ownerReferences": [owner]}, "spec": spec}
            self.api.create(LEASES, LEASE_NAMESPACE, lease)

    async def _serve_kubelet(self) -> None:
        from localkube.kubeletapi import KubeletAuthorizer, kubelet_app, serving_context

        authorizer = None
        if self.client_ca_file is not None:
            authorizer = KubeletAuthorizer(self.node_name, self._review)
        app = kubelet_app(self.api, self.logs, authorizer)
        tls = serving_context(self.address, f"{self.node_name}@localkube", self.client_ca_file)
        self._kubelet_server = KubeletServer(app, self.address, self.kubelet_port, tls)
        self.kubelet_port = await asyncio.to_thread(self._kubelet_server.start)

    async def _review(self, review: dict) -> dict:
        """POST a SubjectAccessReview (off the loop: the server may take a while) and return its answer."""
        path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        return dict(await asyncio.to_thread(self.api.request, "POST", path, body=review))

    def register_node(self) -> dict:
        """Create the Node (or find it there from an earlier run) and write its status: Ready, the address and
        the kubelet endpoint the API server proxies logs to."""
        labels = {
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), "amd64"),
        }
        try:
            self.api.create(NODES, "", {"metadata": {"name": self.node_name, "labels": labels}, "spec": {}})
        except ApiError as exc:
            if exc.code != 409:
                raise
        node = self.api.update_status(NODES, "", self.node_name, self._node_status())
        self._node_uid = node["metadata"]["uid"]
        self._leases = self._renew_lease()
        return node

    def recover_pods(self) -> None:
        """The pods of this node that an earlier agent process was running lost their containers with it:
        write what their restartPolicy makes of that (`localkube.lostpods`) before the runtime starts."""
        from localkube.events import record_event
        from localkube.lostpods import lost_pods, status_after_restart

        for pod in lost_pods(self.api.list(PODS), self.node_name):
            namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            status = status_after_restart(pod, self.node_name)
            if status == pod["status"]:  # none was running: the runtime starts them as it would have
                continue
            message = f"localkube agent restarted on node {self.node_name}: the pod's containers were lost"
            try:
                self.api.update_status(PODS, namespace, name, status)
                record_event(self.api, pod, "Warning", "ContainersLost", message, "kubelet")
            except ApiError as exc:  # deleted meanwhile
                log.warning("localkube agent: pod %s/%s: %s", namespace, name, exc)
            else:
                log.info(
                    "localkube agent: pod %s/%s lost its containers: %s", namespace, name, status["phase"]
                )

    def _node_status(self) -> dict:
        now = now_rfc3339()
        self._ready_since = self._ready_since or now
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 1024
        resources = {"cpu": str(os.cpu_count() or 1), "memory": f"{pages}Ki", "pods": "110"}
        return {
            "addresses": [{"type": "InternalIP", "address": self.address}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": f"localkube agent ({self.runtime} runtime) is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": self._ready_since,
                }
            ],
            "nodeInfo": {
                "kubeletVersion": VERSION["gitVersion"],
                "kubeProxyVersion": VERSION["gitVersion"],
                "containerRuntimeVersion": f"localkube://{self.runtime}",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": platform.platform(),
                "kernelVersion": platform.release(),
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        }

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._kubelet_server is not None:
            await asyncio.to_thread(self._kubelet_server.stop)
            self._kubelet_server = None
        await asyncio.to_thread(self.api.close)

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class KubeletServer:
    """The kubelet endpoint (``app``) on a thread and event loop of its own, as a kubelet serves logs apart
    from its pod work: the controllers and the runtime write to the API server synchronously from the agent's
    loop (``RemoteApi``), and while 100 jobs a second end those writes held the loop for up to 0.7 s, and with
    it every ``pods/log`` request kube-apiserver proxied here (``git show 53df9b2:benchmarks/README.md``,
    "Where the with-logs status change to event goes"). What the app reads is safe from another thread: the
    mirror's objects under its lock, the logs under theirs (``PodLogs`` wakes a follower on the follower's own
    loop)."""

    def __init__(self, app: web.Application, address: str, port: int, tls: ssl.SSLContext) -> None:
        self.address, self.port, self.tls = address, port, tls
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.1)
        self._thread = threading.Thread(target=self._loop.run_forever, name="localkube-kubelet", daemon=True)

    def start(self) -> int:
        """Serve, and return the port it listens on (a free one when ``port`` is 0)."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(STOP_SECONDS)
        return int(self._runner.addresses[0][1])

    async def _listen(self) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, self.address, self.port, ssl_context=self.tls).start()

    def stop(self) -> None:
        """Stop serving (open log follows are cut) and end the thread. A loop still running after the wait
        (a handler that ignores cancellation) is left to the daemon thread: closing a running loop raises."""
        try:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(STOP_SECONDS)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(STOP_SECONDS)
            if not self._thread.is_alive():
                self._loop.close()
