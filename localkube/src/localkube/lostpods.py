"""What a restarted `localkube agent` does with the pods its previous process was running.

A real kubelet that restarts finds its pods' containers still running in the container runtime and carries
on. The agent's runtimes (scripted timelines, local processes) end with the agent's process, so the honest
analogue is a node whose containers terminated while its kubelet was down. Each container of such a pod that
had not terminated is lost: exit code 137, reason `ContainerStatusUnknown`, as a real kubelet reports a
container it can no longer locate. The pod's restartPolicy then decides, as for any terminated container:

- `Never`: the container stays terminated, so the pod is Failed (its `message` says why) once none of its
  containers is left to run;
- `OnFailure`, `Always`: the container is started again, its `restartCount` one higher and the loss as its
  `lastState`; the runtime drives the pod again from its start, keeping those counts.
"""

from __future__ import annotations

import copy
from typing import Any

from localkube.store import now_rfc3339

LOST_REASON = "ContainerStatusUnknown"
LOST_MESSAGE = "The container could not be located when the pod was terminated"
TERMINAL = ("Succeeded", "Failed")


def lost_pods(pods: list[dict], node_name: str) -> list[dict]:
    """The pods of `node_name` that a previous process started (they have container statuses) and that are
    neither over nor being deleted."""
    return [
        pod
        for pod in pods
        if (pod.get("spec") or {}).get("nodeName") == node_name
        and not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("containerStatuses")
        and (pod.get("status") or {}).get("phase") not in TERMINAL
    ]


def status_after_restart(pod: dict, node_name: str) -> dict:
    """The pod's status once its running containers are known lost (see the module's docstring); the same
    status if none was running (its waiting containers start anyway, its terminated ones are done)."""
    status = copy.deepcopy(pod.get("status") or {})
    now = now_rfc3339()
    never = (pod.get("spec") or {}).get("restartPolicy") == "Never"
    inits, mains = status.get("initContainerStatuses") or [], status["containerStatuses"]
    lost_inits = [c for c in inits if _in_state(c, "running")]
    lost = lost_inits + [c for c in mains if _in_state(c, "running")]
    for container in lost:
        if never:
            container.update(state={"terminated": _lost(container, now)}, ready=False, started=False)
        else:
            container.update(
                state={"waiting": {"reason": "ContainerCreating"}},
                lastState={"terminated": _lost(container, now)},
                restartCount=int(container.get("restartCount") or 0) + 1,
                ready=False,
                started=False,
            )
    # Under Never a lost init container fails the pod, and so do its containers once none is left to run.
    over = never and bool(lost) and (bool(lost_inits) or all(_in_state(c, "terminated") for c in mains))
    if over:
        message = f"The pod's containers were lost when localkube agent on node {node_name} restarted"
        status.update(phase="Failed", message=message)
    if lost:
        _not_ready(status, "PodCompleted" if over else "ContainersNotReady", now)
    return status


def _in_state(container: dict, state: str) -> bool:
    return state in (container.get("state") or {})


def _lost(container: dict, now: str) -> dict[str, Any]:
    started = ((container.get("state") or {}).get("running") or {}).get("startedAt")
    terminated = {"exitCode": 137, "reason": LOST_REASON, "message": LOST_MESSAGE, "finishedAt": now}
    return {**terminated, "startedAt": started} if started else terminated


def _not_ready(status: dict, reason: str, now: str) -> None:
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Ready", "ContainersReady") and condition.get("status") != "False":
            condition.update(status="False", reason=reason, lastTransitionTime=now)
