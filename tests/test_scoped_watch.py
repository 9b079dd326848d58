"""Scoped pod watches: the hub asks the server only for the pods of training jobs (each kind's
``pod_watch_selectors``), so a shared namespace's unrelated pods are neither listed, watched nor cached; each
family's replica pods are still seen. Against localkube over HTTP, its controllers labelling the pods as the
upstream operators do."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from localkube.cluster import LocalKube
from localkube.resources import PODS as POD_TYPE
from localkube.runtime import ANNOTATION

from airflow_provider_training.hooks.training import AsyncTrainingJobHook, replica_selectors
from airflow_provider_training.kinds import JobKind, all_kinds, get_kind
from airflow_provider_training.kinds.base import PODS
from airflow_provider_training.triggers.training import TrainingJobTrigger
from airflow_provider_training.watch import WatchHub, serving_scope
from tests.hooks.kube_env import until
from tests.operators.families import CASES
from tests.operators.harness import KIND_BY_NAME, NAMESPACE, manifest, serve, wait_for

pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine

UNRELATED = 40
LONG = json.dumps({"default": {"duration": 3600}})  # runs until the test deletes its job
QUICK = {"default": {"duration": 0.5, "logs": ["replica says hello"]}}


def unrelated_pod(index: int) -> dict[str, Any]:
    """A pod of some other workload of the namespace; some carry labels close to the training ones."""
    labels = [
        {"app": "web", "tier": "frontend"},
        {"app": "batch", "job-name": f"etl-{index}"},  # a batch Job's pod: job-name without the prefix
        {"training.kubeflow.org/operator-name": "pytorchjob-controller"},  # no job name: not a replica
        {"paddle-job-other": "x", "mxnet": ""},
    ][index % 4]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"unrelated-{index:03d}", "labels": labels, "annotations": {ANNOTATION: LONG}},
        "spec": {"containers": [{"name": "app", "image": "localkube/scripted:latest"}]},
    }


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """A localkube (default controllers, scripted runtime) whose namespace holds unrelated pods."""
    with serve(tmp_path_factory) as kube:
        kube.call(
            lambda: [kube.store.create(POD_TYPE, NAMESPACE, unrelated_pod(i)) for i in range(UNRELATED)]
        )
        yield kube


def pod_requests(kube: LocalKube, since: int) -> list[Any]:
    """The pod collection LISTs and WATCHes since request number ``since``."""
    return [r for r in kube.requests[since:] if r.method == "GET" and r.path.endswith("/pods")]


def unrelated_names() -> list[str]:
    return [unrelated_pod(i)["metadata"]["name"] for i in range(UNRELATED)]


def pod_selectors(kind: JobKind, job: str) -> list[str]:
    """Every selector generic code finds a job's pods by: replicas, the master, status children on pods."""
    children = [child.selector(job) for child in kind.children if child.resource == PODS]
    return [*replica_selectors(kind, job), kind.master_selector(job), *children]


@pytest.mark.parametrize("kind", all_kinds(), ids=lambda k: f"{k.kind}-{k.api_version}")
def test_every_kind_scopes_every_pod_selector_it_uses(kind: JobKind):
    assert kind.pod_watch_selectors
    for selector in pod_selectors(kind, "job-1"):
        assert serving_scope(selector, kind.pod_watch_selectors) in kind.pod_watch_selectors


@pytest.mark.parametrize(
    ("selector", "scope", "served_by"),
    [
        ("a=1,b=2", ["b"], "b"),
        ("a=1,b=2", ["c", "a in (1,3)"], "a in (1,3)"),
        ("a in (1,3)", ["a=1"], ""),  # a=3 is outside
        ("a", ["a=1"], ""),
        ("a=1", ["b"], ""),
        ("!a", ["a notin (1)"], "a notin (1)"),
        ("a notin (1,2)", ["a notin (1)"], "a notin (1)"),
        ("a=3", ["a notin (1)"], "a notin (1)"),
        ("a notin (1)", ["!a"], ""),  # a=2 is outside
        ("a=1", ["", "a"], "a"),
    ],
)
def test_a_selector_is_served_by_a_scope_only_when_the_scope_holds_all_it_selects(selector, scope, served_by):
    assert serving_scope(selector, scope) == served_by


def create(kube: LocalKube, kind: JobKind, body: dict[str, Any], name: str) -> str:
    body = {**body, "metadata": {**body["metadata"], "name": name}}
    rt = kube.store.resource_type(kind.resource.group, kind.resource.version, kind.resource.plural)
    kube.call(lambda: kube.store.create(rt, NAMESPACE, body))
    return name


def job_pods(kube: LocalKube, kind: JobKind, name: str) -> dict[str, dict[str, Any]]:
    """The job's replica pods in the store, found as the kind says (its selectors and ``owns_pod``)."""
    return {
        pod["metadata"]["name"]: pod
        for selector in replica_selectors(kind, name)
        for pod in kube.store.list(POD_TYPE, NAMESPACE, label_selector=selector)
        if kind.owns_pod(name, pod)
    }


def in_scope(kube: LocalKube, kind: JobKind) -> set[str]:
    """The namespace's pods the kind's scopes hold (its jobs' pods, other tests' jobs' included)."""
    found = kube.store.list(POD_TYPE, NAMESPACE)
    return {
        pod["metadata"]["name"]
        for scope in kind.pod_watch_selectors
        for pod in kube.store.list(POD_TYPE, NAMESPACE, label_selector=scope)
    } & {pod["metadata"]["name"] for pod in found}


# Per family and lineage whose pods are labelled differently: a job of it whose pods run until deleted.
CASES_BY_ID = {case.id: case for case in CASES}
JOBS = {
    "PyTorchJob": manifest(KIND_BY_NAME["PyTorchJob"], json.loads(LONG)),
    **{
        case: CASES_BY_ID[case].manifest(json.loads(LONG))
        for case in ("EDL-TrainingJob", "MXJob-v1alpha1", "MxJob-mlkube", "T9k-PyTorchTrainingJob")
    },
}


@pytest.mark.parametrize("case", list(JOBS))
async def test_the_hub_lists_watches_and_caches_only_the_pods_of_training_jobs(shared: LocalKube, case: str):
    body = JOBS[case]
    kind = get_kind(body["kind"], body["apiVersion"])
    name = create(shared, kind, body, f"scoped-{case.lower()}")
    await asyncio.to_thread(wait_for, lambda: len(job_pods(shared, kind, name)) >= 2)
    expected = set(job_pods(shared, kind, name))
    since = len(shared.requests)
    hub, hook = WatchHub(), AsyncTrainingJobHook()
    try:
        seen: set[str] = set()
        async with hub.subscribe(
            hook,
            PODS,
            NAMESPACE,
            label_selector=replica_selectors(kind, name),
            scope=kind.pod_watch_selectors,
        ) as events:
            while not expected <= seen:
                event = await asyncio.wait_for(anext(events), 30)  # a hang guard, not a timing assertion
                if kind.owns_pod(name, event.object):
                    seen.add(event.name)
            watches = len(kind.pod_watch_selectors)  # gates: every watch asked for, and caught up
            await until(
                lambda: sum(r.query.get("watch") == "true" for r in pod_requests(shared, since)) == watches
            )
            # The cache holds what the scopes hold (other tests' pods may still be going away).
            await until(lambda: hub.stats.cached == len(in_scope(shared, kind)))
            assert not [pod for pod in unrelated_names() if hub.cached(hook, PODS, NAMESPACE, pod)]
            assert all(hub.cached(hook, PODS, NAMESPACE, pod) for pod in expected)
            requests = pod_requests(shared, since)  # the hub's (the cleanup below lists pods too)
    finally:
        await hook.close()
        await TrainingJobTrigger(
            kind=kind.kind, api_version=kind.api_version, job_name=name, namespace=NAMESPACE
        ).on_kill()

    assert seen == expected
    selectors = sorted(r.query.get("labelSelector") for r in requests)
    # One LIST and one WATCH per scope, each with the scope's selector; nothing asked for the whole namespace.
    assert selectors == sorted([*kind.pod_watch_selectors] * 2)
    assert sum(r.query.get("watch") == "true" for r in requests) == watches


async def test_a_trigger_asks_the_server_for_training_pods_only(shared: LocalKube, capsys):
    kind = get_kind("PyTorchJob")
    body = manifest(KIND_BY_NAME["PyTorchJob"], QUICK)
    name = create(shared, kind, body, "scoped-pytorch-trigger")
    since = len(shared.requests)
    trigger = TrainingJobTrigger(
        kind=kind.kind,
        api_version=kind.api_version,
        job_name=name,
        namespace=NAMESPACE,
        get_logs=True,
        log_replicas="all",
    )
    events = trigger.run()
    try:
        event = (await anext(events)).payload
    finally:
        await events.aclose()

    assert event["status"] == "success" and len(event["pods"]) == 2
    assert "replica says hello" in capsys.readouterr().out  # the log streamer's subscription saw the pods too
    requests = pod_requests(shared, since)
    assert requests and all(r.query.get("labelSelector") for r in requests)
    # The waiter's and the log streamer's pod subscriptions share one scoped watch; any other pod request is
    # a read of this job's own pods.
    scoped = [r for r in requests if r.query.get("watch") == "true"]
    assert {r.query["labelSelector"] for r in scoped} == {"training.kubeflow.org/job-name"}
    for r in requests:
        assert (
            r.query["labelSelector"] == "training.kubeflow.org/job-name" or name in r.query["labelSelector"]
        )


async def test_a_selector_no_scope_holds_and_a_name_are_served_by_the_namespace_wide_watch(shared: LocalKube):
    since = len(shared.requests)
    hub, hook = WatchHub(), AsyncTrainingJobHook()
    scope = get_kind("PyTorchJob").pod_watch_selectors
    try:
        async with (
            hub.subscribe(hook, PODS, NAMESPACE, label_selector="app=web", scope=scope) as web,
            hub.subscribe(hook, PODS, NAMESPACE, name="unrelated-001", scope=scope) as named,
        ):
            first_web = await asyncio.wait_for(anext(web), 30)  # a hang guard, not a timing assertion
            first_named = await asyncio.wait_for(anext(named), 30)
            assert first_web.object["metadata"]["labels"]["app"] == "web"
            assert (first_named.type, first_named.name) == ("ADDED", "unrelated-001")
            assert hub.stats.active_watches == 1  # the two share it
    finally:
        await hook.close()
    lists = [r for r in pod_requests(shared, since) if r.query.get("watch") != "true"]
    assert len(lists) == 1 and "labelSelector" not in lists[0].query
