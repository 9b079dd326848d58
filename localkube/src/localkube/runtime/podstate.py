"""The status of one pod as the kubelet reports it: phase, conditions, container states.

Phase rules (kubernetes-api-semantics.md "Pod status"): Pending until every container has started once;
Succeeded/Failed once every container terminated and none will be restarted under the pod's restartPolicy
(Failed if any exit code is not 0); Running otherwise, including while a container waits in CrashLoopBackOff.
"""

from __future__ import annotations

from typing import Any

from localkube.store import now_rfc3339

POD_IP = HOST_IP = "127.0.0.1"
_CONDITION_ORDER = ("Initialized", "Ready", "ContainersReady", "PodScheduled")


def controller_uid(pod: dict) -> str:
    """The uid of the pod's controller (its job), else the pod's own: what attempt counters are keyed by."""
    refs = pod["metadata"].get("ownerReferences") or []
    owner = next((r for r in refs if r.get("controller")), None)
    return str((owner or {}).get("uid") or pod["metadata"]["uid"])


def _qos_class(containers: list[dict]) -> str:
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("limits") or r.get("requests") for r in resources):
        return "BestEffort"
    for r in resources:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        for name in ("cpu", "memory"):
            if name not in limits or str(requests.get(name, limits[name])) != str(limits[name]):
                return "Burstable"
    return "Guaranteed"


def _container_status(container: dict, waiting: str) -> dict[str, Any]:
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": {"reason": waiting}},
    }


class PodInstance:
    """One pod (one uid) being driven by a runtime, and the status it reports."""

    def __init__(self, pod: dict) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        self.pod = pod
        self.namespace: str = meta.get("namespace", "default")
        self.name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.alive = True
        self.restart_policy: str = spec.get("restartPolicy") or "Always"
        self.init_containers: list[dict] = list(spec.get("initContainers") or [])
        self.containers: list[dict] = list(spec.get("containers") or [])
        self.phase = "Pending"
        self.scheduled = False
        self.init_failed = False
        self.start_time: str | None = None
        self.conditions: dict[str, dict] = {}
        self.ran: set[str] = set()  # containers (main and init) that started at least once
        first_wait = "PodInitializing" if self.init_containers else "ContainerCreating"
        self.init_statuses = {
            c["name"]: _container_status(c, "PodInitializing") for c in self.init_containers
        }
        self.statuses = {c["name"]: _container_status(c, first_wait) for c in self.containers}
        self.done: set[str] = set()  # containers a pod driven again had finished for good: not run again
        previous = pod.get("status") or {}
        self._carry_over(self.init_statuses, previous.get("initContainerStatuses") or [], init=True)
        self._carry_over(self.statuses, previous.get("containerStatuses") or [], init=False)
        self.qos_class = _qos_class(self.containers + self.init_containers)

    def _carry_over(self, statuses: dict[str, dict[str, Any]], previous: list[dict], *, init: bool) -> None:
        """A pod driven again after an agent's restart: each container keeps its restart count and last
        termination, and one that terminated for good stays so (the API server refuses a status that
        takes it back: "may not be transitioned to non-terminated state")."""
        for old in previous:
            status = statuses.get(old.get("name", ""))
            if status is None:
                continue
            status["restartCount"] = int(old.get("restartCount") or 0)
            if old.get("lastState"):
                status["lastState"] = old["lastState"]
            terminated = (old.get("state") or {}).get("terminated")
            if terminated and (terminated.get("exitCode", 0) == 0 if init else self._final(old)):
                status["state"] = old["state"]
                self.ran.add(status["name"])
                self.done.add(status["name"])

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.pod["metadata"].get("labels") or {})

    def status_of(self, name: str, *, init: bool = False) -> dict[str, Any]:
        return (self.init_statuses if init else self.statuses)[name]

    def set_condition(
        self, type_: str, value: bool, reason: str | None = None, message: str | None = None
    ) -> None:
        status = "True" if value else "False"
        current = self.conditions.get(type_)
        changed = current is None or current["status"] != status
        condition: dict[str, Any] = {
            "type": type_,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339() if changed else current["lastTransitionTime"],  # type: ignore[index]
        }
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        self.conditions[type_] = condition

    def schedule(self) -> None:
        self.scheduled = True
        self.start_time = now_rfc3339()
        self.set_condition("PodScheduled", True)
        if self.init_containers:
            names = " ".join(self.init_statuses)
            self.set_condition(
                "Initialized",
                False,
                "ContainersNotInitialized",
                f"containers with incomplete status: [{names}]",
            )
        else:
            self.set_condition("Initialized", True)

    def initialized(self) -> None:
        self.set_condition("Initialized", True)
        for status in self.statuses.values():
            if status["name"] not in self.done:
                status["state"] = {"waiting": {"reason": "ContainerCreating"}}

    def _final(self, status: dict) -> bool:
        """A terminated container that the restartPolicy will not start again."""
        code = status["state"]["terminated"].get("exitCode", 0)
        return self.restart_policy == "Never" or (self.restart_policy == "OnFailure" and code == 0)

    def compute_phase(self) -> str:
        statuses = list(self.statuses.values())
        if self.init_failed:
            return "Failed"
        if not self.scheduled or any(s["name"] not in self.ran for s in statuses):
            return "Pending"
        if all("terminated" in s["state"] for s in statuses) and all(self._final(s) for s in statuses):
            ok = all(s["state"]["terminated"].get("exitCode", 0) == 0 for s in statuses)
            return "Succeeded" if ok else "Failed"
        return "Running"

    def status(self) -> dict[str, Any]:
        """The pod's `.status` now."""
        self.phase = self.compute_phase()
        if self.scheduled:
            unready = [s["name"] for s in self.statuses.values() if not s["ready"]]
            terminal = self.phase in ("Succeeded", "Failed")
            reason = "PodCompleted" if terminal else "ContainersNotReady"
            message = (
                None if terminal or not unready else f"containers with unready status: [{' '.join(unready)}]"
            )
            for type_ in ("ContainersReady", "Ready"):
                self.set_condition(type_, not unready, None if not unready else reason, message)
        status: dict[str, Any] = {"phase": self.phase, "qosClass": self.qos_class}
        if self.conditions:
            status["conditions"] = [self.conditions[t] for t in _CONDITION_ORDER if t in self.conditions]
        if self.scheduled:
            status.update(
                hostIP=HOST_IP,
                hostIPs=[{"ip": HOST_IP}],
                podIP=POD_IP,
                podIPs=[{"ip": POD_IP}],
                startTime=self.start_time,
                containerStatuses=[dict(s) for s in self.statuses.values()],
            )
            if self.init_statuses:
                status["initContainerStatuses"] = [dict(s) for s in self.init_statuses.values()]
        return status
