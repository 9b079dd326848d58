"""`localkube agent` against localkube's own server over HTTP: the Node it registers, the binding it does as
a scheduler, its kubelet endpoint for container logs and the server's proxy to it, and the acceptance test: a
PyTorchJob driven from submission to Succeeded by an agent process with the process runtime, its pods' logs
read through the server's log proxy."""

from __future__ import annotations

import asyncio
import json
import queue
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client, watch
from kubernetes.watch.watch import iter_resp_lines
from localkube.agent import Agent
from localkube.cluster import LocalKube
from localkube.errors import ApiError
from localkube.realcluster import write_certificates
from localkube.remote import RemoteApi
from localkube.resources import EVENTS, NODES, PODS
from localkube.runtime import ANNOTATION, close_gate, open_gate
from localkube.subscriptions import Subscription

NODE = "agent-node"
MERGE = "application/merge-patch+json"


def bare_pod(name: str, script: dict | None = None, **spec: Any) -> dict:
    annotations = {ANNOTATION: json.dumps(script)} if script else {}
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "containers": [{"name": "main", "image": "example/main:1"}],
            "restartPolicy": "Never",
            **spec,
        },
    }


@pytest.fixture
async def agent(kube: LocalKube, kubeconfig: Path) -> AsyncIterator[Agent]:
    """An agent with the scripted runtime and no controllers, in the test's loop (the server has its own).
    A call that makes the server proxy to this agent must not block this loop: run it in a thread."""
    async with Agent(kubeconfig, runtime="scripted", node_name=NODE) as running:
        yield running


async def pod_until(sub: Subscription, name: str, check: Any) -> dict:
    async def wait() -> dict:
        async for event in sub:
            if event.object["metadata"]["name"] == name and check(event.object):
                return event.object
        raise AssertionError("the subscription ended")

    return await asyncio.wait_for(wait(), 30)


def running(pod: dict) -> bool:
    return any(
        "running" in (s.get("state") or {}) for s in (pod.get("status") or {}).get("containerStatuses") or []
    )


async def test_the_agent_registers_a_ready_node(agent: Agent, core: client.CoreV1Api) -> None:
    node = (await asyncio.to_thread(core.read_node, NODE, _preload_content=False)).data
    status = json.loads(node)["status"]

    assert status["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": agent.kubelet_port}}
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Ready", "True")]
    assert agent.kubelet_url == f"https://127.0.0.1:{agent.kubelet_port}"


async def test_the_agent_posts_its_nodes_status_as_a_heartbeat(kube: LocalKube, kubeconfig: Path) -> None:
    def beaten() -> bool:  # timestamps have whole seconds: a beat a second after registration shows it
        (ready,) = kube.store.get(NODES, "", NODE)["status"]["conditions"]
        return bool(ready["lastHeartbeatTime"] > ready["lastTransitionTime"])

    async with Agent(kubeconfig, runtime="scripted", node_name=NODE, heartbeat_seconds=0.05) as agent:
        for _ in range(200):
            if beaten():
                break
            await asyncio.sleep(0.05)
        node = kube.store.get(NODES, "", NODE)

    (ready,) = node["status"]["conditions"]
    assert ready["status"] == "True" and beaten()
    assert agent.lease_renewals == 0  # localkube's server serves no Leases: the Node's status is the beat


async def test_binding_sets_the_node_once(kube: LocalKube, kubeconfig: Path) -> None:
    kube.store.create(PODS, "default", bare_pod("to-bind"))
    api = RemoteApi.from_kubeconfig(kubeconfig, [PODS])
    try:
        bound = api.bind_pod("default", "to-bind", "node-a")
        assert bound["spec"]["nodeName"] == "node-a"
        assert kube.store.get(PODS, "default", "to-bind")["spec"]["nodeName"] == "node-a"
        with pytest.raises(ApiError) as again:
            api.bind_pod("default", "to-bind", "node-b")
        assert again.value.code == 409
        assert again.value.message == (
            'Operation cannot be fulfilled on pods/binding "to-bind": '
            'pod to-bind is already assigned to node "node-a"'
        )
    finally:
        api.close()
    assert [r.path for r in kube.requests if r.method == "POST"] == [
        "/api/v1/namespaces/default/pods/to-bind/binding",
        "/api/v1/namespaces/default/pods/to-bind/binding",
    ]


async def test_the_agent_binds_unscheduled_pods_and_leaves_other_nodes_pods(
    kube: LocalKube, agent: Agent
) -> None:
    sub = agent.store.subscribe(PODS)
    kube.store.create(PODS, "default", bare_pod("elsewhere", nodeName="other-node"))
    kube.store.create(PODS, "default", bare_pod("free"))

    done = await pod_until(sub, "free", lambda p: p["status"].get("phase") == "Succeeded")

    assert done["spec"]["nodeName"] == NODE
    assert kube.store.get(PODS, "default", "elsewhere")["status"] == {
        "phase": "Pending",
        "qosClass": "BestEffort",
    }
    events = {(e["involvedObject"]["name"], e["reason"]): e["message"] for e in kube.store.list(EVENTS)}
    assert events["free", "Scheduled"] == f"Successfully assigned default/free to {NODE}"
    assert ("free", "Started") in events
    assert [name for name, _ in events if name == "elsewhere"] == []
    # the kubelet's writes, as a real kubelet and scheduler send them
    writes = {(r.method, r.path) for r in kube.write_requests()}
    pod = "/api/v1/namespaces/default/pods/free"
    assert {("POST", f"{pod}/binding"), ("PATCH", f"{pod}/status")} <= writes
    assert ("POST", "/api/v1/namespaces/default/events") in writes
    assert not any("elsewhere" in path for _, path in writes)


async def test_the_agent_deletes_a_deleted_pod_of_its_node_once_its_containers_stopped(
    kube: LocalKube, agent: Agent
) -> None:
    """As a real kubelet confirms a graceful deletion: DELETE with gracePeriodSeconds 0 and the pod's uid.
    localkube deletes pods at once, so a finalizer holds this one to make the moment observable."""
    sub = agent.store.subscribe(PODS)
    pod = bare_pod("held", {"default": {"duration": None}})
    pod["metadata"]["finalizers"] = ["example.com/hold"]
    kube.store.create(PODS, "default", pod)
    await pod_until(sub, "held", running)
    path = "/api/v1/namespaces/default/pods/held"

    kube.store.delete(PODS, "default", "held")
    for _ in range(1000):  # the request the server saw: nothing else tells the test
        if ("DELETE", path) in {(r.method, r.path) for r in kube.requests}:
            break
        await asyncio.sleep(0.01)
    kube.store.patch(
        PODS, "default", "held", {"metadata": {"finalizers": None}}, "application/merge-patch+json"
    )

    async def gone() -> None:
        async for event in sub:
            if event.type == "DELETED" and event.object["metadata"]["name"] == "held":
                return

    await asyncio.wait_for(gone(), 30)
    assert [r.path for r in kube.requests if r.method == "DELETE"] == [path]  # once
    assert agent.kubelet is not None and agent.kubelet.instances == {}  # its container stopped


async def test_a_restarted_agent_fails_pods_of_policy_never_and_restarts_the_others(
    kube: LocalKube, kubeconfig: Path
) -> None:
    """The scripted containers end with the agent that ran them; the next agent of the node says so."""
    forever = {"default": {"duration": None}}

    def started() -> bool:
        pods = {p["metadata"]["name"]: p for p in kube.store.list(PODS, "default")}
        pulling = json.dumps(pods["pulling"].get("status"))
        return running(pods["never"]) and running(pods["again"]) and "ImagePullBackOff" in pulling

    async with Agent(kubeconfig, runtime="scripted", node_name=NODE):
        kube.store.create(PODS, "default", bare_pod("never", forever))
        init = [{"name": "setup", "image": "example/setup:1"}]
        again = bare_pod("again", forever, restartPolicy="OnFailure", initContainers=init)
        kube.store.create(PODS, "default", again)
        kube.store.create(PODS, "default", bare_pod("pulling", {"default": {"pending": "ImagePullBackOff"}}))
        for _ in range(600):  # the three of them as the runtime drives them (the server's own thread)
            if started():
                break
            await asyncio.sleep(0.05)
        assert started()

    async with Agent(kubeconfig, runtime="scripted", node_name=NODE) as second:
        sub = second.store.subscribe(PODS)
        never = kube.store.get(PODS, "default", "never")  # settled before the runtime starts
        pulling = kube.store.get(PODS, "default", "pulling")
        again = await pod_until(
            sub, "again", lambda p: running(p) and p["status"]["containerStatuses"][0]["restartCount"] == 1
        )
        sub.close()

    (lost,) = never["status"]["containerStatuses"]
    assert never["status"]["phase"] == "Failed"
    assert never["status"]["message"] == (
        f"The pod's containers were lost when localkube agent on node {NODE} restarted"
    )
    assert lost["state"]["terminated"]["exitCode"] == 137
    assert lost["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
    (restarted,) = again["status"]["containerStatuses"]
    assert again["status"]["phase"] == "Running"
    assert restarted["lastState"]["terminated"]["reason"] == "ContainerStatusUnknown"
    (setup,) = again["status"]["initContainerStatuses"]  # completed: not run again (a real server refuses
    assert setup["state"]["terminated"]["exitCode"] == 0  # a status that takes it out of `terminated`)
    setup_events = [e for e in kube.store.list(EVENTS, "default") if "container setup" in e["message"]]
    assert {e["reason"]: e["count"] for e in setup_events} == {"Created": 1, "Started": 1}
    assert pulling["status"]["phase"] == "Pending"  # nothing was running: nothing lost, the runtime goes on
    lost_events = [e for e in kube.store.list(EVENTS, "default") if e["reason"] == "ContainersLost"]
    assert sorted(e["involvedObject"]["name"] for e in lost_events) == ["again", "never"]


async def test_logs_through_the_kubelet_endpoint_and_the_servers_proxy(
    kube: LocalKube, agent: Agent, core: client.CoreV1Api
) -> None:
    close_gate("agent-logs")
    script = {"default": {"duration": 0, "logs": ["one", "two", "three"], "gate": "agent-logs"}}
    script["default"]["after_gate"] = ["four"]
    sub = agent.store.subscribe(PODS)
    kube.store.create(PODS, "default", bare_pod("talker", script))
    await pod_until(sub, "talker", running)

    def follow_through_the_server() -> list[str]:
        """Follow the log through the API server; open the gate once the first three lines came."""
        response = core.read_namespaced_pod_log("talker", "default", follow=True, _preload_content=False)
        lines = []
        for line in iter_resp_lines(response):
            lines.append(line)
            if line == "three":
                open_gate("agent-logs")
        return lines

    assert await asyncio.to_thread(follow_through_the_server) == ["one", "two", "three", "four"]
    await pod_until(sub, "talker", lambda p: p["status"].get("phase") == "Succeeded")

    def tail_through_the_server() -> str:
        response = core.read_namespaced_pod_log("talker", "default", tail_lines=2, _preload_content=False)
        return response.data.decode()

    assert await asyncio.to_thread(tail_through_the_server) == "three\nfour\n"
    async with aiohttp.ClientSession() as session:
        url = f"{agent.kubelet_url}/containerLogs/default/talker/main"
        async with session.get(url, params={"tailLines": "1"}, ssl=False) as direct:
            assert (direct.status, await direct.text()) == (200, "four\n")
        async with session.get(url.replace("/main", "/nope"), ssl=False) as wrong:
            assert wrong.status == 400
            assert (await wrong.json())["message"] == "container nope is not valid for pod talker"
    # the server itself ran nothing: every line came from the agent's kubelet
    assert kube.logs.instances("default", "talker", "main") == []


async def test_with_a_client_ca_the_kubelet_endpoint_authenticates_and_fails_closed(
    kube: LocalKube, kubeconfig: Path, tmp_path: Path, core: client.CoreV1Api
) -> None:
    """localkube's server neither presents a client certificate nor answers SubjectAccessReviews: an agent
    with --client-ca-file refuses it (tests/real/test_agent_real.py has the real server's side)."""
    certs = write_certificates(tmp_path)
    tls = ssl.create_default_context()
    tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
    with_cert = ssl.create_default_context()
    with_cert.check_hostname, with_cert.verify_mode = False, ssl.CERT_NONE
    with_cert.load_cert_chain(certs["kubelet_client_cert"], certs["kubelet_client_key"])
    async with Agent(kubeconfig, runtime="scripted", node_name=NODE, client_ca_file=certs["ca"]) as agent:
        kube.store.create(PODS, "default", bare_pod("quiet", nodeName=NODE))
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{agent.kubelet_url}/healthz", ssl=tls) as anonymous:
                assert (anonymous.status, await anonymous.text()) == (401, "Unauthorized")
            async with session.get(f"{agent.kubelet_url}/healthz", ssl=with_cert) as unreviewed:
                assert unreviewed.status == 403  # no SubjectAccessReview API: refused, not let through
                assert (await unreviewed.text()).startswith("Forbidden (user=kube-apiserver-kubelet-client,")
        with pytest.raises(client.ApiException) as proxied:
            await asyncio.to_thread(core.read_namespaced_pod_log, "quiet", "default")
    assert proxied.value.status == 401


async def test_the_proxy_answers_500_when_the_kubelet_is_gone(
    kube: LocalKube, core: client.CoreV1Api
) -> None:
    kube.store.create(NODES, "", {"metadata": {"name": "dead"}})
    status = {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 1}}
    kube.store.update_status(NODES, "", "dead", status)
    kube.store.create(PODS, "default", bare_pod("orphan", nodeName="dead"))

    with pytest.raises(client.ApiException) as failed:
        await asyncio.to_thread(core.read_namespaced_pod_log, "orphan", "default")

    assert failed.value.status == 500
    message = json.loads(failed.value.body)["message"]
    assert message.startswith('Get "https://127.0.0.1:1/containerLogs/default/orphan/main": ')


async def test_an_agent_without_a_runtime_runs_controllers_only(kube: LocalKube, kubeconfig: Path) -> None:
    job = {"metadata": {"name": "only-pods"}, "spec": {"pytorchReplicaSpecs": {"Master": replica()}}}
    async with Agent(kubeconfig, runtime="none", controllers=["kubeflow"]) as agent:
        sub = agent.store.subscribe(PODS)
        kube.store.create(kube.store.resource_type("kubeflow.org", "v1", "pytorchjobs"), "default", job)
        pod = await pod_until(sub, "only-pods-master-0", lambda p: True)

    assert (pod["metadata"]["ownerReferences"][0]["kind"], pod["spec"].get("nodeName")) == (
        "PyTorchJob",
        None,
    )
    assert agent.kubelet is None
    assert kube.store.list(NODES) == []


# -- acceptance: a PyTorchJob run by an agent process --------------------------------------------------------
PRINTER = "import os\nfor i in range(3):\n    print(os.environ['HOSTNAME'], 'says', i, flush=True)\n"


def replica() -> dict:
    container = {"name": "pytorch", "image": "example/train:1", "command": ["python", "-c", PRINTER]}
    return {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}


@pytest.fixture
def agent_process(kubeconfig: Path) -> Iterator[subprocess.Popen]:
    """`localkube agent --kubeconfig K --runtime process --controllers kubeflow`, once it says it is ready."""
    script = shutil.which("localkube", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "localkube"]
    process = subprocess.Popen(
        [
            *command,
            "agent",
            "--kubeconfig",
            str(kubeconfig),
            "--runtime",
            "process",
            "--controllers",
            "kubeflow",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stdout or ()], daemon=True)
    reader.start()
    try:
        ready = lines.get(timeout=60)
        while ready.startswith("20"):  # log lines before it (e.g. that localkube's server has no Leases)
            ready = lines.get(timeout=60)
        assert ready.startswith("localkube agent node localkube-agent kubelet https://127.0.0.1:"), ready
        yield process
    finally:
        process.terminate()
        code = process.wait(30)
        reader.join(5)
        output = "".join(lines.get() for _ in range(lines.qsize()))
        print("agent output:", output, sep="\n")
        assert code == 0, output  # SIGTERM stops it cleanly


def test_acceptance_a_pytorchjob_run_by_an_agent_process(
    kube: LocalKube, agent_process: subprocess.Popen, core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "remote-train"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }
    custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", job)

    states = []
    for event in watch.Watch().stream(
        custom.list_namespaced_custom_object,
        "kubeflow.org",
        "v1",
        "default",
        "pytorchjobs",
        field_selector="metadata.name=remote-train",
        timeout_seconds=90,
    ):
        conditions = (event["object"].get("status") or {}).get("conditions") or []
        states = [c["type"] for c in conditions if c["status"] == "True"]
        if "Succeeded" in states or "Failed" in states:
            break
    assert "Succeeded" in states
    selector = "training.kubeflow.org/job-name=remote-train"
    phases: dict[str, str] = {}
    for event in watch.Watch().stream(
        core.list_namespaced_pod, "default", label_selector=selector, timeout_seconds=60
    ):
        phases[event["object"].metadata.name] = event["object"].status.phase
        if len(phases) == 2 and set(phases.values()) == {"Succeeded"}:
            break
    assert phases == {"remote-train-master-0": "Succeeded", "remote-train-worker-0": "Succeeded"}

    for pod in sorted(phases):
        assert kube.store.get(PODS, "default", pod)["spec"]["nodeName"] == "localkube-agent"
        log = core.read_namespaced_pod_log(pod, "default", container="pytorch", _preload_content=False)
        text = log.data.decode()
        print(f"{pod} log through the server's proxy:\n{text}", end="")
        assert text == "".join(f"{pod} says {i}\n" for i in range(3))
    assert kube.logs.instances("default", "remote-train-master-0", "pytorch") == []  # not the server's own
