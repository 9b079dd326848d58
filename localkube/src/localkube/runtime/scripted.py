"""The scripted pod runtime: every container follows a deterministic timeline (see `script.py`).

No process runs. A container sleeps through its step's `duration` while writing the step's log lines evenly
spread over it, then exits with the step's exit code. A step can hold its pod Pending as Unschedulable or in
ImagePullBackOff first. Init containers complete at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from localkube.gates import gate
from localkube.resources import ResourceType
from localkube.runtime.kubelet import Kubelet, PodInstance, RunResult
from localkube.runtime.podstate import controller_uid
from localkube.runtime.script import (
    ANNOTATION,
    ScriptError,
    Step,
    parse_script,
    registered_script,
    resolve_step,
)
from localkube.store import ApiError

MAX_OWNER_DEPTH = 3  # pod -> batch Job -> JobSet -> TrainJob
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
UNSCHEDULABLE_MESSAGE = (
    "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
    "1 No preemption victims found for incoming pod."
)


def replica_of(labels: dict[str, str]) -> tuple[str | None, str | None]:
    """The pod's replica type and index for script selectors: the `...replica-type`/`...replica-index`
    labels of the training operators, else a JobSet pod's replicated job
    (`jobset.sigs.k8s.io/replicatedjob-name`: `node`, `launcher`) and an Indexed Job pod's
    `batch.kubernetes.io/job-completion-index` (so `node-1` selects the node of rank 1)."""
    rtype = next((v for k, v in labels.items() if k.endswith("replica-type")), None)
    index = next((v for k, v in labels.items() if k.endswith("replica-index")), None)
    return rtype or labels.get(REPLICATED_JOB), index or labels.get(COMPLETION_INDEX)


@dataclass
class _ScriptedRun:
    runtime: ScriptedRuntime
    inst: PodInstance
    container: str
    step: Step
    values: dict[str, str]

    async def wait(self) -> RunResult:
        lines = self.step.render_logs(self.values)
        interval = (self.step.duration or 0.0) / max(len(lines), 1)
        for line in lines:
            self.runtime.write_log(self.inst, self.container, line)
            await asyncio.sleep(interval)
        if self.step.gate is not None:
            await gate(self.step.gate).wait(f"pod {self.inst.name} container {self.container}")
            for line in self.step.render_logs(self.values, self.step.after_gate):
                self.runtime.write_log(self.inst, self.container, line)
        if self.step.duration is None:
            await asyncio.Event().wait()  # until the pod is deleted
        elif not lines:
            await asyncio.sleep(self.step.duration)
        return RunResult(self.step.exit_code, self.step.reason, self.step.message)


class _InstantRun:
    async def wait(self) -> RunResult:
        return RunResult(0)


class ScriptedRuntime(Kubelet):
    """Drives pods through scripted timelines."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: dict[str, dict | ScriptError | None] = {}  # per pod uid

    # -- the script of a pod -------------------------------------------------------------------------------
    def script_of(self, inst: PodInstance) -> dict | None:
        """The pod's own annotation, else the nearest controller's up the owner chain (the job, also through a
        ReplicaSet or batch Job), else a script registered for one of their names."""
        if inst.uid not in self.scripts:
            self.scripts[inst.uid] = self._find_script(inst)
        found = self.scripts[inst.uid]
        if isinstance(found, ScriptError):
            raise found
        return found

    def _find_script(self, inst: PodInstance) -> dict | ScriptError | None:
        sources = [inst.pod]
        while len(sources) <= MAX_OWNER_DEPTH and (owner := self._owner(sources[-1])) is not None:
            sources.append(owner)
        try:
            for obj in sources:
                text = (obj["metadata"].get("annotations") or {}).get(ANNOTATION)
                if text:
                    return parse_script(text)
        except ScriptError as exc:
            return exc
        names = [obj["metadata"]["name"] for obj in reversed(sources)]
        return registered_script(inst.namespace, *names)

    def _owner(self, obj: dict) -> dict | None:
        ref = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
        if ref is None:
            return None
        rt = self._resource_type(ref.get("apiVersion", ""), ref.get("kind", ""))
        try:
            return self.store.get(rt, obj["metadata"]["namespace"], ref["name"]) if rt else None
        except ApiError:
            return None

    def _resource_type(self, api_version: str, kind: str) -> ResourceType | None:
        return next(
            (rt for rt in self.store.resource_types() if rt.api_version == api_version and rt.kind == kind),
            None,
        )

    def step_for(self, inst: PodInstance, container: str, attempt: int) -> Step:
        rtype, index = replica_of(inst.labels)
        return resolve_step(
            self.script_of(inst),
            pod=inst.name,
            container=container,
            attempt=attempt,
            replica_type=rtype,
            replica_index=index,
        )

    def _next_step(self, inst: PodInstance) -> Step:
        """The step the pod's first container is about to run: it decides pod-level holds (pending)."""
        first = inst.containers[0]["name"]
        key = (inst.namespace, inst.name, controller_uid(inst.pod), "main", first)
        return self.step_for(inst, first, self.attempts.get(key, 0))

    # -- kubelet hooks -------------------------------------------------------------------------------------
    async def schedule(self, inst: PodInstance) -> None:
        try:
            step = self._next_step(inst)
        except ScriptError:
            return  # reported when the container runs
        if step.pending != "Unschedulable":
            return
        inst.set_condition("PodScheduled", False, "Unschedulable", UNSCHEDULABLE_MESSAGE)
        self.event(inst, "Warning", "FailedScheduling", UNSCHEDULABLE_MESSAGE, component="default-scheduler")
        self.publish(inst)
        await self._hold(step)

    async def pull(self, inst: PodInstance, container: dict, attempt: int, *, init: bool) -> None:
        step = None
        if not init:  # init containers complete at once: the hold is the replica's own image
            with contextlib.suppress(ScriptError):
                step = self.step_for(inst, container["name"], attempt)
        if step is not None and step.pending == "ImagePullBackOff":
            await self._image_pull_back_off(inst, container, step)
        await super().pull(inst, container, attempt, init=init)

    async def _image_pull_back_off(self, inst: PodInstance, container: dict, step: Step) -> None:
        image = container.get("image", "")
        status = inst.status_of(container["name"])
        why = (
            f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": '
            f"{image}: not found"
        )
        self.event(inst, "Normal", "Pulling", f'Pulling image "{image}"')
        self.event(inst, "Warning", "Failed", f'Failed to pull image "{image}": {why}')
        self.event(inst, "Warning", "Failed", "Error: ErrImagePull")
        status["state"] = {"waiting": {"reason": "ErrImagePull", "message": why}}
        self.publish(inst)
        back_off = f'Back-off pulling image "{image}"'
        self.event(inst, "Normal", "BackOff", back_off)
        self.event(inst, "Warning", "Failed", "Error: ImagePullBackOff")
        status["state"] = {"waiting": {"reason": "ImagePullBackOff", "message": back_off}}
        self.publish(inst)
        await self._hold(step)
        status["state"] = {"waiting": {"reason": "ContainerCreating"}}

    @staticmethod
    async def _hold(step: Step) -> None:
        if step.pending_for is None:
            await asyncio.Event().wait()  # until the pod is deleted
        else:
            await asyncio.sleep(step.pending_for)

    async def launch(self, inst: PodInstance, container: dict, attempt: int, *, init: bool) -> Any:
        if init:
            return _InstantRun()
        name = container["name"]
        try:
            step = self.step_for(inst, name, attempt)
        except ScriptError as exc:
            message = f"localkube: invalid {ANNOTATION}: {exc}"
            self.event(inst, "Warning", "FailedScriptParse", message)
            step = resolve_step(
                {"default": {"logs": [message], "exit_code": 2, "duration": 0}},
                pod=inst.name,
                container=name,
                attempt=0,
            )
        await asyncio.sleep(step.start_delay)
        rtype, index = replica_of(inst.labels)
        values = {
            "pod": inst.name,
            "container": name,
            "namespace": inst.namespace,
            "attempt": str(attempt),
            "type": rtype or "",
            "index": index or "",
        }
        return _ScriptedRun(self, inst, name, step, values)

    def restart_delay(self, inst: PodInstance, container: dict, restarts: int) -> float:
        try:
            first = self.step_for(inst, container["name"], 0).backoff
        except ScriptError:
            first = self.first_backoff
        return float(min(first * 2 ** (restarts - 1), self.max_backoff))

    def write_log(self, inst: PodInstance, container: str, line: str) -> None:
        if inst.alive:
            self.logs.write(inst.namespace, inst.name, container, line)

    def pod_stopped(self, inst: PodInstance) -> None:
        self.scripts.pop(inst.uid, None)
