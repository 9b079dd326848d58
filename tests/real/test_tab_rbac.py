"""The Training tab's cluster reads on the real API server, as the identity docs/ui-tab.md documents for them:
the task's own connection (here a ServiceAccount bound to exactly the Role of docs/rbac.md). Its snapshot
(job, status, pods, events), its log tail (``/api/logs``) and its shared log follow (``/api/logs/stream``) are
the api-server's code, run in-process; then each rule they use is removed in turn and the tab's message must
name the refused verb and resource."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from localkube.realcluster import RealCluster

from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.logs import container_name
from airflow_provider_training.plugins import ui_cluster, ui_logs
from airflow_provider_training.plugins.ui_cluster import ClusterError, Hooks, Snapshot, describe_failure
from tests.operators.harness import KIND_BY_NAME, make_context, run_operator
from tests.real.rbac import Grant, bind, documented_rules, set_rules, without
from tests.real.test_kinds import operator_for

pytestmark = pytest.mark.timeout(180)
PYTORCH = KIND_BY_NAME["PyTorchJob"]
KIND = get_kind("PyTorchJob")
CONN = "kubernetes_default"
NAME = "tab-job"
MASTER = f"{NAME}-master-0"


@pytest.fixture(scope="module")
def tab_grant(real_cluster: RealCluster) -> Iterator[tuple[Grant, str]]:
    """The documented Role's account in namespace ``rbac-tab``, with one finished PyTorchJob it ran there;
    yields the grant and the job's uid."""
    grant = bind(real_cluster, documented_rules(), "rbac-tab")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", grant.connection_json)
        script = {"default": {"duration": 0.3, "logs": ["{type}-{index} saved model"]}}
        result = run_operator(
            operator_for(PYTORCH, NAME, script, namespace=grant.namespace), make_context(), "sync"
        )
    assert result["state"] == "Succeeded"
    job = real_cluster.get(f"/apis/kubeflow.org/v1/namespaces/{grant.namespace}/pytorchjobs/{NAME}")
    yield grant, job["metadata"]["uid"]
    real_cluster.request("DELETE", f"/api/v1/namespaces/{grant.namespace}")


@pytest.fixture
def tab(tab_grant, monkeypatch) -> tuple[Grant, str]:
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", tab_grant[0].connection_json)
    return tab_grant


async def snapshot(namespace: str, uid: str) -> Snapshot:
    """What ``/api/job`` reads (its cache aside): one hook per connection, as the api-server keeps them."""
    hooks = Hooks()
    try:
        return await ui_cluster.read_snapshot(hooks.get(CONN), KIND, NAME, namespace, uid)
    finally:
        await hooks.close()


async def log_tail(namespace: str) -> str:
    """What ``/api/logs`` reads: the master's last lines, or the 502 detail it answers."""
    hooks = Hooks()
    try:
        return await hooks.get(CONN).read_log(namespace, MASTER, KIND.default_container, tail_lines=100)
    except Exception as err:
        return f"502: {describe_failure(err, CONN)}"
    finally:
        await hooks.close()


async def follow(namespace: str, pod: dict[str, Any]) -> list[tuple[str, dict]]:
    """What ``/api/logs/stream`` sends, as (event, data) pairs, until its ``end``."""
    hooks = Hooks()
    meta = pod["metadata"]
    container = container_name(pod, KIND.default_container)
    events = []
    try:
        async for chunk in ui_logs.stream(
            hooks.get(CONN), namespace, MASTER, meta["uid"], container, None, 100
        ):
            if chunk.startswith(":"):
                continue
            fields = dict(line.split(": ", 1) for line in chunk.strip().splitlines())
            events.append((fields["event"], json.loads(fields["data"])))
    finally:
        await hooks.close()
    return events


def test_the_documented_role_reads_everything_the_tab_shows(real_cluster, tab):
    grant, uid = tab

    snap = asyncio.run(snapshot(grant.namespace, uid))
    tail = asyncio.run(log_tail(grant.namespace))
    (master,) = [p for p in snap.pods if p["metadata"]["name"] == MASTER]
    streamed = asyncio.run(follow(grant.namespace, master))

    assert snap.job is not None and snap.status is not None and snap.status.state.value == "Succeeded"
    assert {p["metadata"]["name"] for p in snap.pods} == {MASTER, f"{NAME}-worker-0"}
    assert snap.events, "the job's and its pods' events"
    assert "master-0 saved model" in tail
    assert ("line", {"time": streamed[0][1]["time"], "text": "master-0 saved model"}) in streamed
    assert streamed[-1] == ("end", {"reason": "the pod succeeded"})


REFUSED = [  # (id, resource, verb): the rule the tab's read needs
    ("job-get", "pytorchjobs", "get"),
    ("pods-list", "pods", "list"),
    ("events-list", "events", "list"),
]


@pytest.mark.parametrize(("case", "resource", "verb"), REFUSED, ids=[case for case, _, _ in REFUSED])
def test_a_refused_snapshot_read_names_verb_and_resource(real_cluster, tab, case, resource, verb):
    grant, uid = tab
    group = "kubeflow.org" if resource == "pytorchjobs" else ""
    set_rules(real_cluster, grant, without(documented_rules(), resource, verb, group))
    try:
        with pytest.raises(ClusterError) as refused:
            asyncio.run(snapshot(grant.namespace, uid))
    finally:
        set_rules(real_cluster, grant, documented_rules())

    full = f"{resource}.{group}" if group else resource
    assert_tab_names(str(refused.value), verb, full, grant.namespace)


def test_a_refused_log_read_names_verb_and_resource(real_cluster, tab):
    grant, _ = tab
    set_rules(real_cluster, grant, without(documented_rules(), "pods/log", "get"))
    try:
        tail = asyncio.run(log_tail(grant.namespace))
    finally:
        set_rules(real_cluster, grant, documented_rules())

    assert tail.startswith("502: ")
    assert_tab_names(tail, "get", "pods/log", grant.namespace)


def test_a_refused_pod_read_ends_the_log_follow_naming_verb_and_resource(real_cluster, tab):
    """The follow re-reads the pod (a GET) when its log ends, to tell a finished container from a restart."""
    grant, uid = tab
    (master,) = [
        p for p in asyncio.run(snapshot(grant.namespace, uid)).pods if p["metadata"]["name"] == MASTER
    ]
    set_rules(real_cluster, grant, without(documented_rules(), "pods", "get"))
    try:
        streamed = asyncio.run(follow(grant.namespace, master))
    finally:
        set_rules(real_cluster, grant, documented_rules())

    assert ("line", {"time": streamed[0][1]["time"], "text": "master-0 saved model"}) in streamed
    event, data = streamed[-1]
    assert event == "end" and data["reason"].startswith("the log could not be followed: ")
    assert_tab_names(data["reason"], "get", "pods", grant.namespace)


def assert_tab_names(text: str, verb: str, resource: str, namespace: str) -> None:
    assert f"The Kubernetes API refused `{verb}` on `{resource}`" in text, text
    assert f"in namespace {namespace} (403 Forbidden) to the credentials of connection '{CONN}'" in text, text
    assert "(docs/rbac.md)" in text, text
