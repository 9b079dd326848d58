"""The kubelet's part of localkube, shared by both pod runtimes.

It watches pods, and for every new pod schedules it, "pulls" images, runs init containers then containers,
restarts containers in place per the pod's restartPolicy (with CrashLoopBackOff), and writes the pod status
and the events a real node writes (Scheduled, Pulling, Pulled, Created, Started, BackOff). How a container
actually runs is the subclass's business (:meth:`Kubelet.launch`). Deleting a pod stops its containers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from localkube.events import record_event
from localkube.resources import PODS
from localkube.runtime.podstate import PodInstance, controller_uid
from localkube.store import ApiError, WatchEvent, now_rfc3339

log = logging.getLogger(__name__)

NODE_NAME = "localkube"
CONFIG_RETRY = 0.5
RUNTIME_ERROR = "LocalkubeRuntimeError"  # reason of the event and pod status when driving a pod crashed


class PodGone(Exception):
    """The pod was deleted (or replaced by a new pod of the same name): stop driving it."""


class ContainerConfigError(Exception):
    """The container cannot be configured yet (a missing Secret or ConfigMap key): wait and retry."""


class StartFailure(Exception):
    """The container's process could not be started (no such executable)."""


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    reason: str | None = None  # default: Completed / Error
    message: str | None = None


class Execution(Protocol):
    async def wait(self) -> RunResult:
        """Until the container exits; cancelled when the pod is deleted."""


class Kubelet:
    """Base class of the pod runtimes; subclasses implement :meth:`launch`."""

    first_backoff, max_backoff = 0.05, 2.0
    # In-process the kubelet drives every pod and binds it to `localkube` (no Node object). An agent sets its
    # node's name and `own_node_only`: it then takes only unscheduled pods (binding them through the API) and
    # pods bound to its node.
    node_name = NODE_NAME
    own_node_only = False

    def __init__(self) -> None:
        self.instances: dict[str, PodInstance] = {}
        self.tasks: dict[str, asyncio.Task] = {}
        self.deleting: dict[str, asyncio.Task | None] = {}  # an agent's final deletes by pod uid (None: sent)
        self.attempts: dict[tuple[str, ...], int] = {}
        self.pulled: set[str] = set()

    # -- hooks ---------------------------------------------------------------------------------------------
    async def schedule(self, inst: PodInstance) -> None:
        """Wait until the pod may be bound to the node (the scripted runtime can hold it Unschedulable)."""

    async def launch(self, inst: PodInstance, container: dict, attempt: int, *, init: bool) -> Execution:
        raise NotImplementedError

    def restart_delay(self, inst: PodInstance, container: dict, restarts: int) -> float:
        return float(min(self.first_backoff * 2 ** (restarts - 1), self.max_backoff))

    def pod_stopped(self, inst: PodInstance) -> None:
        """The pod is gone (deleted or the runtime stops); release what it held."""

    async def close(self) -> None:
        """The runtime stops, after every pod was stopped."""

    # -- the watch -----------------------------------------------------------------------------------------
    async def run(self, cluster: Any) -> None:
        self.store, self.logs = cluster.store, cluster.logs
        subscription = self.store.subscribe(PODS)
        try:
            for pod in self.store.list(PODS):
                if pod["metadata"].get("deletionTimestamp"):
                    self._finish_deletion(pod, None)
                elif not (pod.get("status") or {}).get("containerStatuses") or self._resumed(pod):
                    self._start(pod)
            async for event in subscription:
                self._on_event(event)
        finally:
            subscription.close()
            tasks = [*self.tasks.values(), *filter(None, self.deleting.values())]
            for uid in list(self.instances):
                self._stop(uid)
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.close()

    def _on_event(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if event.type == "DELETED":
            self._stop(meta["uid"])
            self.deleting.pop(meta["uid"], None)
        elif meta.get("deletionTimestamp"):
            self._finish_deletion(event.object, self.tasks.get(meta["uid"]))
            self._stop(meta["uid"])
        elif event.type == "ADDED":
            self._start(event.object)

    def _finish_deletion(self, pod: dict, task: asyncio.Task | None) -> None:
        """A real API server keeps a deleted pod of a node (`deletionTimestamp` set) until the node's kubelet,
        its containers stopped, deletes it with grace period 0: an agent does that for its node's pods.
        In-process the store deletes pods at once, and a pod held by finalizers is left to them."""
        uid = pod["metadata"]["uid"]
        on_this_node = (pod.get("spec") or {}).get("nodeName") == self.node_name
        if self.own_node_only and on_this_node and uid not in self.deleting:
            self.deleting[uid] = asyncio.create_task(self._delete_now(pod, task))

    async def _delete_now(self, pod: dict, task: asyncio.Task | None) -> None:
        meta = pod["metadata"]
        try:
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)  # its containers are stopped
            self.store.delete(
                PODS,
                meta["namespace"],
                meta["name"],
                preconditions={"uid": meta["uid"]},
                grace_period_seconds=0,
            )
        except ApiError as exc:  # gone already, or another pod of the name now (the uid precondition)
            log.debug("final delete of pod %s/%s: %s", meta["namespace"], meta["name"], exc.message)
        finally:
            if meta["uid"] in self.deleting:
                self.deleting[meta["uid"]] = None  # sent: not again for this pod

    def _start(self, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self.instances or not self._mine(pod):
            return
        try:
            inst = PodInstance(pod)
        except Exception as exc:  # a spec the runtime cannot read: this pod fails, the others go on
            self._crashed(pod, None, exc)
            return
        self.instances[uid] = inst
        self.tasks[uid] = asyncio.create_task(self._drive(inst), name=f"pod {inst.namespace}/{inst.name}")

    def _resumed(self, pod: dict) -> bool:
        """A pod of an agent's node that ran under its previous process and is not over: the agent wrote
        what became of its containers (localkube.lostpods); drive it again."""
        on_this_node = (pod.get("spec") or {}).get("nodeName") == self.node_name
        return (
            self.own_node_only and on_this_node and pod["status"].get("phase") not in ("Succeeded", "Failed")
        )

    def _mine(self, pod: dict) -> bool:
        return not self.own_node_only or (pod.get("spec") or {}).get("nodeName") in (None, "", self.node_name)

    def _stop(self, uid: str) -> None:
        inst = self.instances.pop(uid, None)
        task = self.tasks.pop(uid, None)
        if inst is None:
            return
        inst.alive = False
        self.logs.forget_pod(inst.namespace, inst.name)
        if task is not None:
            task.cancel()
        self.pod_stopped(inst)

    # -- one pod -------------------------------------------------------------------------------------------
    async def _drive(self, inst: PodInstance) -> None:
        try:
            await self.schedule(inst)
            inst.schedule()
            self._check_current(inst)
            self._bind(inst)
            self.event(
                inst,
                "Normal",
                "Scheduled",
                f"Successfully assigned {inst.namespace}/{inst.name} to {self.node_name}",
                component="default-scheduler",
            )
            self.publish(inst)
            for container in (c for c in inst.init_containers if c["name"] not in inst.done):
                result = await self._run_with_restarts(inst, container, init=True)
                if result.exit_code != 0:
                    inst.init_failed = True
                    self.publish(inst)
                    return
            if inst.init_containers:
                inst.initialized()
                self.publish(inst)
            async with asyncio.TaskGroup() as group:
                for container in (c for c in inst.containers if c["name"] not in inst.done):
                    group.create_task(self._run_with_restarts(inst, container, init=False))
        except* PodGone:
            pass
        except* Exception as group:
            self._crashed(inst.pod, inst, group.exceptions[0])

    def _bind(self, inst: PodInstance) -> None:
        """The scheduler's binding, unless the pod is on this node already (an agent picking up its pods)."""
        spec = inst.pod.setdefault("spec", {})
        if self.own_node_only and spec.get("nodeName") == self.node_name:
            return
        try:
            self.store.bind_pod(inst.namespace, inst.name, self.node_name)
        except ApiError as exc:
            # 409: another scheduler bound it first, not this node's pod; 404: deleted before it was bound
            # (an EDL or batch Job pod its controller removed a moment earlier): nothing to run either way.
            if exc.code in (404, 409):
                inst.alive = False
                raise PodGone from exc
            raise
        spec["nodeName"] = self.node_name  # what the downward API's spec.nodeName reads

    def _crashed(self, pod: dict, inst: PodInstance | None, exc: BaseException) -> None:
        """An unexpected error while driving one pod: logged, a Warning event on the pod, and the pod Failed
        (its log followers end); the runtime goes on driving every other pod."""
        meta = pod["metadata"]
        namespace, name = meta.get("namespace", "default"), meta["name"]
        log.error("localkube runtime: pod %s/%s", namespace, name, exc_info=exc)
        message = f"localkube runtime error: {type(exc).__name__}: {exc}"
        if inst is not None:
            for container in inst.ran:
                self.logs.close_container(namespace, name, container)
        with contextlib.suppress(ApiError):
            record_event(self.store, pod, "Warning", RUNTIME_ERROR, message, "kubelet")
        with contextlib.suppress(ApiError):  # gone already, or replaced by another pod of the same name
            current = self.store.get(PODS, namespace, name)
            if current["metadata"]["uid"] == meta["uid"]:
                status = {**(current.get("status") or {}), "phase": "Failed"}
                status.update(reason=RUNTIME_ERROR, message=message)
                self.store.update_status(PODS, namespace, name, status)

    async def _run_with_restarts(self, inst: PodInstance, container: dict, *, init: bool) -> RunResult:
        while True:
            result = await self._run_once(inst, container, init=init)
            again = (
                result.exit_code != 0 if init else inst.restart_policy == "Always" or result.exit_code != 0
            )
            if inst.restart_policy == "Never" or not again:
                return result
            await self._back_off(inst, container, init=init)

    async def _run_once(self, inst: PodInstance, container: dict, *, init: bool) -> RunResult:
        name = container["name"]
        status = inst.status_of(name, init=init)
        key = (inst.namespace, inst.name, controller_uid(inst.pod), "init" if init else "main", name)
        attempt = self.attempts.get(key, 0)
        self.attempts[key] = attempt + 1
        if name not in inst.ran:
            status["state"] = {"waiting": {"reason": "ContainerCreating"}}
            self.publish(inst)
            await self.pull(inst, container, attempt, init=init)
        execution = await self._launch(inst, container, attempt, init=init)
        if isinstance(execution, RunResult):
            result = execution
        else:
            self.event(inst, "Normal", "Created", f"Created container {name}")
            self.event(inst, "Normal", "Started", f"Started container {name}")
            if inst.alive:
                self.logs.start_container(inst.namespace, inst.name, name)
            inst.ran.add(name)
            started = now_rfc3339()
            status.update(state={"running": {"startedAt": started}}, started=True, ready=not init)
            self.publish(inst)
            result = await execution.wait()
            if inst.alive:
                self.logs.close_container(inst.namespace, inst.name, name)
            status["state"] = {"terminated": self._terminated(result, started)}
        status.update(ready=False, started=False)
        self.publish(inst)
        return result

    async def _launch(
        self, inst: PodInstance, container: dict, attempt: int, *, init: bool
    ) -> Execution | RunResult:
        """Start the container, waiting out configuration errors; a start failure is an immediate result."""
        status = inst.status_of(container["name"], init=init)
        while True:
            try:
                return await self.launch(inst, container, attempt, init=init)
            except ContainerConfigError as exc:
                status["state"] = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                self.event(inst, "Warning", "Failed", f"Error: {exc}")
                self.publish(inst)
                await asyncio.sleep(CONFIG_RETRY)
            except StartFailure as exc:
                self.event(inst, "Warning", "Failed", f"Error: {exc}")
                inst.ran.add(container["name"])
                now = now_rfc3339()
                status["state"] = {
                    "terminated": {
                        "exitCode": 128,
                        "reason": "StartError",
                        "message": str(exc),
                        "startedAt": now,
                        "finishedAt": now,
                    }
                }
                return RunResult(128, "StartError", str(exc))

    @staticmethod
    def _terminated(result: RunResult, started: str) -> dict:
        terminated: dict[str, Any] = {
            "exitCode": result.exit_code,
            "reason": result.reason or ("Completed" if result.exit_code == 0 else "Error"),
            "startedAt": started,
            "finishedAt": now_rfc3339(),
        }
        if result.message:
            terminated["message"] = result.message
        return terminated

    async def _back_off(self, inst: PodInstance, container: dict, *, init: bool) -> None:
        name = container["name"]
        status = inst.status_of(name, init=init)
        status["restartCount"] += 1
        status["lastState"] = {"terminated": status["state"]["terminated"]}
        delay = self.restart_delay(inst, container, status["restartCount"])
        who = f"{inst.name}_{inst.namespace}({inst.uid})"
        status["state"] = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {delay:g}s restarting failed container={name} pod={who}",
            }
        }
        self.event(inst, "Warning", "BackOff", f"Back-off restarting failed container {name} in pod {who}")
        self.publish(inst)
        await asyncio.sleep(delay)

    async def pull(self, inst: PodInstance, container: dict, attempt: int, *, init: bool) -> None:
        """Image pull events: a pull the first time (or always with `imagePullPolicy: Always`)."""
        image = container.get("image", "")
        tag = image.rsplit("/", 1)[-1].partition("@")[0].partition(":")[2]
        policy = container.get("imagePullPolicy") or ("Always" if tag in ("", "latest") else "IfNotPresent")
        if policy != "Always" and image in self.pulled:
            self.event(inst, "Normal", "Pulled", f'Container image "{image}" already present on machine')
            return
        self.event(inst, "Normal", "Pulling", f'Pulling image "{image}"')
        self.pulled.add(image)
        self.event(
            inst, "Normal", "Pulled", f'Successfully pulled image "{image}" in 1ms (1ms including waiting)'
        )

    # -- writes --------------------------------------------------------------------------------------------
    def publish(self, inst: PodInstance) -> None:
        """Write the pod's status, unless the pod is gone or is another pod of the same name now."""
        self._check_current(inst)
        self.store.update_status(PODS, inst.namespace, inst.name, inst.status())

    def _check_current(self, inst: PodInstance) -> None:
        if not inst.alive:
            raise PodGone
        try:
            current = self.store.get(PODS, inst.namespace, inst.name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            current = None
        if current is None or current["metadata"]["uid"] != inst.uid:
            inst.alive = False
            raise PodGone

    def event(
        self, inst: PodInstance, type_: str, reason: str, message: str, *, component: str = "kubelet"
    ) -> None:
        if inst.alive:
            with contextlib.suppress(ApiError):
                record_event(self.store, inst.pod, type_, reason, message, component)
