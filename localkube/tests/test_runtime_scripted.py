"""The scripted pod runtime: pod phases, container states, events and logs as a kubelet reports them,
following the timeline a script sets (docs/localkube-runtimes.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from localkube.runtime import (
    close_gate,
    open_gate,
    register_script,
    unregister_script,
)
from localkube.runtime.script import ScriptError, parse_script, resolve_step
from test_controller_support import SCRIPT, KubeClient, conditions, job, kc, replica

__all__ = ["kc"]


def bare_pod(name: str, script: dict | None = None, *, restart_policy: str = "Never", **spec: Any) -> dict:
    metadata: dict[str, Any] = {"name": name}
    if script is not None:
        metadata["annotations"] = {SCRIPT: json.dumps(script)}
    containers = [{"name": "main", "image": "example/main:1"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": containers, "restartPolicy": restart_policy, **spec},
    }


def watch_pod(kc: KubeClient, name: str, until: Callable[[Any], bool], since: str | None = None) -> list[Any]:
    """Every state of the pod seen through a watch (from resourceVersion ``since``: every change after it,
    however late the watch starts) until `until` holds."""
    seen = []
    for event in watch.Watch().stream(
        kc.core.list_namespaced_pod,
        "default",
        field_selector=f"metadata.name={name}",
        resource_version=since,
        timeout_seconds=60,
    ):
        seen.append(event["object"])
        if until(event["object"]):
            return seen
    pytest.fail(f"pod {name} never reached the expected state")


def wait_raw_status(kc: KubeClient, name: str, check: Callable[[dict], bool]) -> dict:
    """Poll one pod's `.status` as raw JSON (the typed model refuses some specs) until `check` holds."""
    found: list[dict] = []

    def ready() -> bool:
        response = kc.core.read_namespaced_pod(name, "default", _preload_content=False)
        status = json.loads(response.data).get("status") or {}
        if check(status):
            found.append(status)
        return bool(found)

    kc.wait_until(ready, f"pod {name}")
    return found[0]


def state_name(pod: Any) -> tuple[str, str | None]:
    statuses = pod.status.container_statuses or []
    if not statuses:
        return pod.status.phase, None
    state = statuses[0].state
    for key in ("waiting", "running", "terminated"):
        if getattr(state, key) is not None:
            reason = getattr(getattr(state, key), "reason", None)
            return pod.status.phase, f"{key}:{reason}" if reason else key
    return pod.status.phase, None


def restarts(pod: Any) -> int:
    return int(pod.status.container_statuses[0].restart_count)


def test_a_bare_pod_runs_its_default_timeline(kc: KubeClient) -> None:
    created = kc.core.create_namespaced_pod("default", bare_pod("plain"))
    seen = watch_pod(kc, "plain", lambda p: p.status.phase == "Succeeded", created.metadata.resource_version)
    states = [state_name(p) for p in seen]
    assert states[-1] == ("Succeeded", "terminated:Completed")
    order = [s for i, s in enumerate(states) if s not in states[:i]]
    assert order.index(("Pending", "waiting:ContainerCreating")) < order.index(("Running", "running"))
    final = seen[-1]
    assert final.status.container_statuses[0].state.terminated.exit_code == 0
    assert final.status.pod_ip == "127.0.0.1"
    assert final.spec.node_name == "localkube"
    assert {c.type: c.status for c in final.status.conditions} == {
        "Initialized": "True",
        "Ready": "False",
        "ContainersReady": "False",
        "PodScheduled": "True",
    }
    assert kc.log("plain") == "plain/main: training step 1\nplain/main: done\n"
    assert kc.reasons("plain") == ["Scheduled", "Pulling", "Pulled", "Created", "Started"]
    (scheduled,) = [e for e in kc.events("plain") if e.reason == "Scheduled"]
    assert scheduled.source.component == "default-scheduler"


def test_exit_code_reason_and_message(kc: KubeClient) -> None:
    script = {"default": {"exit_code": 137, "reason": "OOMKilled", "message": "out of memory", "logs": []}}
    kc.core.create_namespaced_pod("default", bare_pod("oom", script))
    pod = kc.wait_pod("oom", lambda p: p.status.phase == "Failed")
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason, terminated.message) == (
        137,
        "OOMKilled",
        "out of memory",
    )


def test_unschedulable_then_scheduled(kc: KubeClient) -> None:
    kc.core.create_namespaced_pod(
        "default", bare_pod("stuck", {"default": {"pending": "Unschedulable", "pending_for": 0.3}})
    )
    pending = kc.wait_pod("stuck", lambda p: bool(p.status.conditions))
    (scheduled,) = pending.status.conditions
    assert (pending.status.phase, scheduled.type, scheduled.status, scheduled.reason) == (
        "Pending",
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    (failed,) = [e for e in kc.events("stuck") if e.reason == "FailedScheduling"]
    assert failed.type == "Warning" and "0/1 nodes are available" in failed.message
    kc.wait_pod("stuck", lambda p: p.status.phase == "Succeeded")


def test_image_pull_back_off_then_pulled(kc: KubeClient) -> None:
    kc.core.create_namespaced_pod(
        "default", bare_pod("pull", {"default": {"pending": "ImagePullBackOff", "pending_for": 0.4}})
    )
    stuck = kc.wait_pod("pull", lambda p: state_name(p) == ("Pending", "waiting:ImagePullBackOff"))
    assert (
        stuck.status.container_statuses[0].state.waiting.message == 'Back-off pulling image "example/main:1"'
    )
    with pytest.raises(ApiException) as info:
        kc.log("pull")
    assert info.value.status == 400
    message = json.loads(info.value.body)["message"]
    assert message == 'container "main" in pod "pull" is waiting to start: ImagePullBackOff'
    events = [(e.type, e.reason, e.message) for e in kc.events("pull")]
    assert ("Warning", "Failed", "Error: ImagePullBackOff") in events
    assert ("Normal", "BackOff", 'Back-off pulling image "example/main:1"') in events
    kc.wait_pod("pull", lambda p: p.status.phase == "Succeeded")


def test_image_pull_back_off_of_a_pytorch_worker_with_its_init_container(kc: KubeClient) -> None:
    """The worker's own image cannot be pulled; its `init-pytorch` init container still completes first."""
    specs = {"Master": replica("pytorch"), "Worker": replica("pytorch")}
    script = {"Worker": {"pending": "ImagePullBackOff", "pending_for": 0.4}}
    kc.create(job("PyTorchJob", "pullinit", specs, script=script))
    stuck = kc.wait_pod(
        "pullinit-worker-0", lambda p: state_name(p) == ("Pending", "waiting:ImagePullBackOff")
    )
    (init,) = stuck.status.init_container_statuses
    assert (init.name, init.state.terminated.reason) == ("init-pytorch", "Completed")
    assert {c.type: c.status for c in stuck.status.conditions}["Initialized"] == "True"
    assert ("Warning", "Failed", "Error: ImagePullBackOff") in [
        (e.type, e.reason, e.message) for e in kc.events("pullinit-worker-0")
    ]
    kc.wait_condition("PyTorchJob", "pullinit", "Succeeded")
    done = kc.wait_pod("pullinit-worker-0", lambda p: p.status.phase == "Succeeded")
    assert done.status.container_statuses[0].state.terminated.exit_code == 0


def test_restart_always_crash_loops_until_deleted(kc: KubeClient) -> None:
    kc.core.create_namespaced_pod(
        "default",
        bare_pod("loop", {"default": {"duration": 0.01, "logs": ["run {attempt}"]}}, restart_policy="Always"),
    )
    pod = kc.wait_pod("loop", lambda p: bool(p.status.container_statuses) and restarts(p) >= 2)
    assert pod.status.phase == "Running"
    assert pod.status.container_statuses[0].last_state.terminated.reason == "Completed"
    assert "BackOff" in kc.reasons("loop")
    kc.core.delete_namespaced_pod("loop", "default")
    with pytest.raises(ApiException) as info:
        kc.log("loop")
    assert info.value.status == 404


def test_init_containers_complete_first(kc: KubeClient) -> None:
    pod = bare_pod("init", initContainers=[{"name": "setup", "image": "busybox:1"}])
    kc.core.create_namespaced_pod("default", pod)
    done = kc.wait_pod("init", lambda p: p.status.phase == "Succeeded")
    init = done.status.init_container_statuses[0]
    assert (init.name, init.state.terminated.reason, init.state.terminated.exit_code) == (
        "setup",
        "Completed",
        0,
    )
    reasons = kc.reasons("init")
    assert reasons.index("Started") < len(reasons) - 1  # init started before main
    assert [e.message for e in kc.events("init") if e.reason == "Created"] == [
        "Created container setup",
        "Created container main",
    ]


def test_per_container_override(kc: KubeClient) -> None:
    script = {"default": {"containers": {"sidecar": {"duration": None, "logs": ["sidecar up"]}}}}
    pod = bare_pod("pair", script)
    pod["spec"]["containers"].append({"name": "sidecar", "image": "example/sidecar:1"})
    kc.core.create_namespaced_pod("default", pod)
    running = kc.wait_pod("pair", lambda p: state_name(p)[1] == "terminated:Completed")
    assert running.status.phase == "Running"  # the sidecar still runs
    assert kc.log("pair", container="sidecar") == "sidecar up\n"


def test_invalid_script_fails_the_container_visibly(kc: KubeClient) -> None:
    kc.core.create_namespaced_pod("default", bare_pod("typo", {"default": {"exitcode": 1}}))
    pod = kc.wait_pod("typo", lambda p: p.status.phase == "Failed")
    assert pod.status.container_statuses[0].state.terminated.exit_code == 2
    assert "FailedScriptParse" in kc.reasons("typo")
    assert "default.exitcode: unknown field" in kc.log("typo")


def test_registered_script_and_live_log_follow(kc: KubeClient) -> None:
    register_script(
        "registered", {"Worker": {"duration": 0.6, "logs": ["a", "b", "c"]}, "Master": {"exit_code": 1}}
    )
    try:
        specs = {"Master": replica("pytorch", restart_policy="Never"), "Worker": replica("pytorch")}
        kc.create(job("PyTorchJob", "registered", specs))
        kc.wait_pod("registered-worker-0", lambda p: p.status.phase == "Running")
        stream = kc.core.read_namespaced_pod_log(
            "registered-worker-0", "default", follow=True, _preload_content=False
        )
        lines = b"".join(stream.stream(amt=16)).decode().splitlines()
        assert lines == ["a", "b", "c"]
        final = kc.wait_condition("PyTorchJob", "registered", "Failed")
        assert conditions(final)[-1] == ("Failed", "True", "PyTorchJobFailed")
    finally:
        unregister_script("registered")


def test_script_found_up_the_owner_chain(kc: KubeClient) -> None:
    """pod -> ReplicaSet -> job: the nearest annotated controller scripts the pod (other API families)."""
    owner = kc.create(
        job(
            "JAXJob",
            "chain",
            {"Worker": replica("jax")},
            script={"default": {"exit_code": 4, "backoff": 0.01}},
            runPolicy={"suspend": True},
        )
    )
    template = bare_pod("unused", restart_policy="Always")
    template["metadata"] = {"labels": {"app": "chain"}}
    replica_set = {
        "metadata": {"name": "chain-rs", "ownerReferences": [_ref(owner)]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "chain"}}, "template": template},
    }
    client.AppsV1Api(kc.api).create_namespaced_replica_set("default", replica_set, _preload_content=False)

    def crashed_with_4() -> bool:
        pods = kc.core.list_namespaced_pod("default", label_selector="app=chain").items
        statuses = [s for p in pods for s in p.status.container_statuses or []]
        ends = [s.last_state.terminated for s in statuses if s.last_state is not None]
        return any(end is not None and end.exit_code == 4 for end in ends)

    kc.wait_until(crashed_with_4, "the ReplicaSet's pod to exit 4 as the job's script says")
    (pod,) = kc.core.list_namespaced_pod("default", label_selector="app=chain").items
    assert pod.metadata.name.startswith("chain-rs-")
    assert pod.status.phase == "Running"  # restartPolicy Always: it crash-loops


def test_a_pod_the_runtime_cannot_drive_fails_alone(kc: KubeClient) -> None:
    """Specs localkube accepts but the runtime trips over (a nameless container, a numeric image): each such
    pod is Failed with a Warning event, and the runtime goes on driving the other pods."""
    nameless = bare_pod("nameless")
    del nameless["spec"]["containers"][0]["name"]
    numeric_image = bare_pod("numeric-image")
    numeric_image["spec"]["containers"][0]["image"] = 5
    for pod in (nameless, numeric_image):
        name = pod["metadata"]["name"]
        kc.core.create_namespaced_pod("default", pod, _preload_content=False)
        status = wait_raw_status(kc, name, lambda st: st.get("phase") == "Failed")
        assert status["reason"] == "LocalkubeRuntimeError"
        (event,) = [e for e in kc.events(name) if e.reason == "LocalkubeRuntimeError"]
        assert event.type == "Warning"
        assert event.message.startswith("localkube runtime error: ")
        assert event.message == status["message"]
    kc.core.create_namespaced_pod("default", bare_pod("after"))
    kc.wait_pod("after", lambda p: p.status.phase == "Succeeded")


def _ref(obj: dict) -> dict:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


# -- the script format (no cluster) -------------------------------------------------------------------------
def test_selectors_merge_from_default_to_pod_name() -> None:
    script = parse_script(
        """
        default: {duration: 0.5, logs: [hello]}
        worker: {exit_code: 1}
        Worker-1: {attempts: [{exit_code: 137}, {exit_code: 0, logs: [second]}]}
        job-worker-1: {reason: Custom}
        """
    )
    step = resolve_step(
        script, pod="job-worker-1", container="c", attempt=0, replica_type="worker", replica_index="1"
    )
    assert (step.duration, step.logs, step.exit_code, step.reason) == (0.5, ("hello",), 137, "Custom")
    again = resolve_step(
        script, pod="job-worker-1", container="c", attempt=5, replica_type="worker", replica_index="1"
    )
    assert (again.exit_code, again.logs) == (0, ("second",))  # the last attempt repeats
    other = resolve_step(
        script, pod="job-worker-0", container="c", attempt=0, replica_type="worker", replica_index="0"
    )
    assert (other.exit_code, other.reason) == (1, None)
    default = resolve_step(None, pod="p", container="c", attempt=0)
    assert (default.duration, default.exit_code, default.pending) == (0.2, 0, None)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("[1, 2]", "must be a mapping"),
        ('{"default": {"exitcode": 1}}', "default.exitcode: unknown field"),
        ('{"Worker": {"pending": "Sleepy"}}', "Worker.pending: must be one of"),
        ('{"Worker": {"exit_code": "1"}}', "Worker.exit_code: invalid value"),
        ('{"Worker": {"attempts": [{"attempts": []}]}}', "attempts do not nest"),
        ("{default: [", "neither JSON nor YAML"),
    ],
)
def test_script_errors_name_the_field(source: str, message: str) -> None:
    with pytest.raises(ScriptError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_script(source)


def test_a_gated_container_runs_until_its_gate_opens(kc: KubeClient) -> None:
    close_gate("test-gate")
    kc.core.create_namespaced_pod(
        "default", bare_pod("gated", {"default": {"duration": 0, "logs": ["waiting"], "gate": "test-gate"}})
    )
    kc.wait_pod("gated", lambda p: p.status.phase == "Running")
    kc.wait_until(lambda: kc.log("gated") == "waiting\n", "the gated pod's log line")
    # However long the test took to get here, the container is still at its gate.
    assert kc.core.read_namespaced_pod("gated", "default").status.phase == "Running"

    open_gate("test-gate")
    pod = kc.wait_pod("gated", lambda p: p.status.phase == "Succeeded")
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0


def test_after_gate_lines_are_written_once_the_gate_opens(kc: KubeClient) -> None:
    close_gate("after-gate")
    step = {"duration": 0, "logs": ["before"], "gate": "after-gate", "after_gate": ["{pod} after"]}
    script = {"default": step}
    kc.core.create_namespaced_pod("default", bare_pod("after", script))
    kc.wait_pod("after", lambda p: p.status.phase == "Running")
    kc.wait_until(lambda: kc.log("after") == "before\n", "the line before the gate")
    assert kc.core.read_namespaced_pod("after", "default").status.phase == "Running"

    open_gate("after-gate")
    kc.wait_pod("after", lambda p: p.status.phase == "Succeeded")
    assert kc.log("after") == "before\nafter after\n"


def test_a_gate_opened_before_the_container_reaches_it_is_passed(kc: KubeClient) -> None:
    open_gate("open-early")
    kc.core.create_namespaced_pod(
        "default", bare_pod("early", {"default": {"duration": 0, "gate": "open-early"}})
    )
    assert kc.wait_pod("early", lambda p: p.status.phase == "Succeeded").status.phase == "Succeeded"
    with pytest.raises(ScriptError, match=r"default\.gate: invalid value 3"):
        parse_script({"default": {"gate": 3}})
