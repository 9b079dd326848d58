"""Cluster networking for the process runtime: every replica runs on 127.0.0.1.

Service DNS names (`<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`, `<svc>.<ns>.svc.cluster.local`) resolve to
127.0.0.1, and each (namespace, service, port) gets its own free local port, so that two replicas that both
"listen on 23456" do not collide. The env of every container is rewritten with one mapping: `host:port`
pairs in plain values and in JSON values (TF_CONFIG, MX_CONFIG), `{"url", "port"}` objects, bare host names,
and port variables paired with an address variable (MASTER_PORT with MASTER_ADDR, ...). A pod's own IP with
one of its container ports maps to its own service's local port (PaddleJob's `$(POD_IP_DUMMY):port`).
"""

from __future__ import annotations

import json
import re
import socket
from typing import TYPE_CHECKING, Any

from localkube.resources import PODS, SERVICES
from localkube.runtime.podstate import POD_IP

if TYPE_CHECKING:
    from localkube.api import ClusterApi

LOCALHOST = "127.0.0.1"
_HOST_PORT = re.compile(
    r"(?<![\w.@-])([a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*)(?::(\d{1,5}))?(?![\w.-])"
)
PORT_VARIABLES = {  # port variable -> the variable that names its host
    "MASTER_PORT": "MASTER_ADDR",
    "PET_MASTER_PORT": "PET_MASTER_ADDR",
    "DMLC_PS_ROOT_PORT": "DMLC_PS_ROOT_URI",
    "COORDINATOR_PORT": "COORDINATOR_ADDRESS",
    "WORKER_PORT": "WORKER_ADDRS",
}


def free_port(host: str = LOCALHOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LocalNetwork:
    """The port allocations of one cluster, stable for its lifetime (restarted pods keep their ports)."""

    def __init__(self) -> None:
        self.ports: dict[tuple[str, str, int], int] = {}

    def port(self, namespace: str, service: str, port: int) -> int:
        key = (namespace, service, int(port))
        if key not in self.ports:
            taken = set(self.ports.values())
            local = free_port()
            while local in taken:
                local = free_port()
            self.ports[key] = local
        return self.ports[key]

    def rewriter(self, store: ClusterApi, pod: dict) -> EnvRewriter:
        return EnvRewriter(self, store, pod)


class EnvRewriter:
    """Rewrites one container's env for the pod it belongs to."""

    def __init__(self, network: LocalNetwork, store: ClusterApi, pod: dict) -> None:
        self.network, self.store = network, store
        self.namespace: str = pod["metadata"].get("namespace", "default")
        self.pod_name: str = pod["metadata"]["name"]
        self.own_ports = {
            int(p["containerPort"])
            for c in (pod.get("spec") or {}).get("containers") or []
            for p in c.get("ports") or []
            if "containerPort" in p
        }
        self._names: dict[tuple[str, bool], set[str]] = {}

    def names(self, namespace: str, *, pods: bool) -> set[str]:
        """Service names in a namespace, and with `pods` also pod names (a replica's pod and Service share a
        name, and the Service may be created just after the pod)."""
        if (namespace, pods) not in self._names:
            objects = self.store.list(SERVICES, namespace) + (
                self.store.list(PODS, namespace) if pods else []
            )
            self._names[(namespace, pods)] = {o["metadata"]["name"] for o in objects}
        return self._names[(namespace, pods)]

    def resolve(self, host: str, *, pods: bool = True) -> tuple[str, str] | None:
        """(namespace, service) for a cluster DNS name, else None. A pod's own name under a headless Service,
        `<hostname>.<service>[.<namespace>[.svc...]]` (JobSet's and the MPI Operator's pods), is a service of
        its own, `<hostname>.<service>`: each such pod gets its own local ports."""
        parts = host.split(".")
        pod_namespace = parts[2] if len(parts) > 2 else self.namespace
        under_service = len(parts) > 1 and (len(parts) < 4 or parts[3] == "svc")
        if under_service and parts[1] in self.names(pod_namespace, pods=False):
            return (pod_namespace, f"{parts[0]}.{parts[1]}")
        namespace = parts[1] if len(parts) > 1 else self.namespace
        if len(parts) > 2 and parts[2] != "svc":
            return None
        return (namespace, parts[0]) if parts[0] in self.names(namespace, pods=pods) else None

    def local_port(self, host: str, port: int) -> int | None:
        if host == POD_IP and port in self.own_ports:
            return self.network.port(self.namespace, self.pod_name, port)
        target = self.resolve(host)
        return self.network.port(target[0], target[1], port) if target else None

    def rewrite_text(self, text: str, *, address: bool = False) -> str:
        """`host:port` of a replica becomes `127.0.0.1:<local port>`; a bare host name becomes 127.0.0.1 if it
        is a Service's, or (`address`: the value is known to hold addresses) any replica's."""

        def replace(match: re.Match[str]) -> str:
            host, port = match.group(1), match.group(2)
            if port is not None:
                local = self.local_port(host, int(port))
                return f"{LOCALHOST}:{local}" if local else match.group(0)
            return LOCALHOST if self.resolve(host, pods=address) else match.group(0)

        return _HOST_PORT.sub(replace, text)

    def _rewrite_json(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.rewrite_text(value)
        if isinstance(value, list):
            return [self._rewrite_json(v) for v in value]
        if isinstance(value, dict):
            url, port = value.get("url"), value.get("port")
            if isinstance(url, str) and isinstance(port, int) and self.resolve(url):
                return {**value, "url": LOCALHOST, "port": self.local_port(url, port)}
            return {k: self._rewrite_json(v) for k, v in value.items()}
        return value

    def rewrite_value(self, value: str) -> str:
        if value.lstrip().startswith(("{", "[")):
            try:
                parsed = json.loads(value)
            except ValueError:
                return self.rewrite_text(value)
            return json.dumps(self._rewrite_json(parsed), separators=(",", ":"))
        return self.rewrite_text(value)

    def rewrite(self, env: dict[str, str]) -> dict[str, str]:
        out = {name: self.rewrite_value(value) for name, value in env.items()}
        for host_var in PORT_VARIABLES.values():
            if host_var in env:
                out[host_var] = self.rewrite_text(env[host_var], address=True)
        for port_var, host_var in PORT_VARIABLES.items():
            host = env.get(host_var, "").split(",")[0].strip()
            port = env.get(port_var, "")
            if host and port.isdigit():
                local = self.local_port(host, int(port))
                if local:
                    out[port_var] = str(local)
        return out
