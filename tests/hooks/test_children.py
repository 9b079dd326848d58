"""Child objects that controllers leave unlabelled or undeleted (EDL), and replica pods a selector cannot
tell apart (mlkube MxJob): found, merged, filtered and cleaned up against localkube over HTTP."""

from __future__ import annotations

import dataclasses

from airflow_provider_training.jobs import create_job, delete_job
from airflow_provider_training.kinds.base import BATCH_JOBS, PODS, REPLICASETS, ChildResource, JobState
from airflow_provider_training.kinds.registry import get_kind
from tests.hooks.family_objects import (
    create_edl_children,
    create_mlkube_pod,
    edl_cluster_options,
    edl_training_job,
    mlkube_pod_name,
    names_in,
    running_pods,
    scripted_edl_job,
)
from tests.hooks.kube_env import cluster_and_hook, requests_to, until

EDL = get_kind("TrainingJob", "paddlepaddle.org/v1")
MXJOB = get_kind("MxJob", "mxnet.mlkube.io/v1beta1")


def _names(objects: list[dict]) -> list[str]:
    return sorted(obj["metadata"]["name"] for obj in objects)


async def test_list_children_merges_entries_and_finds_unlabelled_children_by_name(kube, hook):
    await create_job(hook, EDL, edl_training_job("example"), "default")
    mine = create_edl_children(kube, "example")
    create_edl_children(kube, "other")

    children = await hook.list_children(EDL, "example", "default")

    assert sorted(children) == sorted([BATCH_JOBS.key, REPLICASETS.key, PODS.key])
    assert _names(children[BATCH_JOBS.key]) == ["example-trainer"]
    assert _names(children[REPLICASETS.key]) == ["example-master", "example-pserver"]
    assert _names(children[PODS.key]) == sorted(mine[PODS.key])  # trainer, pserver and master pods, once
    # The unlabelled children were read by name, not listed by a selector that cannot find them.
    # (Read concurrently, so in no fixed order.)
    assert sorted(r.path for r in requests_to(kube, "replicasets")) == [
        "/apis/apps/v1/namespaces/default/replicasets/example-master",
        "/apis/apps/v1/namespaces/default/replicasets/example-pserver",
    ]
    job = await hook.get_job(EDL, "example", "default")
    status = EDL.read_status(job, children)
    assert set(status.replicas) == {"TRAINER", "PSERVER", "MASTER"}
    assert status.replicas["PSERVER"].desired == 2 and status.replicas["MASTER"].desired == 1


async def test_a_named_child_that_does_not_exist_yet_is_absent(kube, hook):
    await create_job(hook, EDL, edl_training_job("fresh"), "default")
    children = await hook.list_children(EDL, "fresh", "default")
    assert children == {BATCH_JOBS.key: [], REPLICASETS.key: [], PODS.key: []}
    status = EDL.read_status(await hook.get_job(EDL, "fresh", "default"), children)
    assert status.state == JobState.PENDING


async def test_entries_selecting_the_same_objects_merge_each_object_once(kube, hook):
    overlapping = dataclasses.replace(
        EDL,
        children=(
            ChildResource(PODS, lambda job: f"paddle-job={job}", needed_for_status=True),
            ChildResource(PODS, lambda job: "paddle-job", needed_for_status=True),
            ChildResource(
                REPLICASETS, lambda job: "", needed_for_status=True, name=lambda job: f"{job}-master"
            ),
            ChildResource(
                REPLICASETS, lambda job: "", needed_for_status=True, name=lambda job: f"{job}-master"
            ),
        ),
    )
    create_edl_children(kube, "example")
    create_edl_children(kube, "other")
    children = await hook.list_children(overlapping, "example", "default")
    assert _names(children[REPLICASETS.key]) == ["example-master"]
    # The second selector matches every trainer pod; each pod is listed once.
    trainers = [f"{job}-trainer-{i:05d}" for job in ("example", "other") for i in range(2)]
    assert _names(children[PODS.key]) == sorted(trainers)


async def test_delete_job_leaves_no_child_behind(kube, hook):
    await create_job(hook, EDL, edl_training_job("example"), "default")
    await create_job(hook, EDL, edl_training_job("other"), "default")
    create_edl_children(kube, "example")
    theirs = create_edl_children(kube, "other")
    # A pod whose controller is already gone is found by its label alone.
    kube.store.delete(kube.store.resource_type("batch", "v1", "jobs"), "default", "example-trainer", "Orphan")

    assert await delete_job(hook, EDL, "example", "default") is True

    assert await hook.get_job(EDL, "example", "default") is None
    assert names_in(kube, BATCH_JOBS) == set(theirs[BATCH_JOBS.key])
    assert names_in(kube, REPLICASETS) == set(theirs[REPLICASETS.key])
    assert names_in(kube, PODS) == set(theirs[PODS.key])


async def test_delete_job_cleans_children_left_by_a_job_already_gone(kube, hook):
    create_edl_children(kube, "orphaned")
    assert await delete_job(hook, EDL, "orphaned", "default") is False
    assert names_in(kube, BATCH_JOBS) == names_in(kube, REPLICASETS) == names_in(kube, PODS) == set()


async def test_list_job_pods_takes_every_replica_selector(kube, hook):
    mine = create_edl_children(kube, "example")
    create_edl_children(kube, "other")
    pods = await hook.list_job_pods(EDL, "example", "default")
    assert _names(pods) == sorted(mine[PODS.key])
    master = await hook.list_job_pods(EDL, "example", "default", master=True)
    assert _names(master) == ["example-trainer-00000", "example-trainer-00001"]


async def test_list_job_pods_keeps_only_the_pods_the_kind_owns(kube, hook):
    for job in ("mnist", "mnist-big"):  # "mnist-big-..." pod names also start with "mnist-"
        for replica_type, index in (("SCHEDULER", 0), ("SERVER", 0), ("WORKER", 0), ("WORKER", 1)):
            create_mlkube_pod(kube, job, replica_type, index)

    pods = await hook.list_job_pods(MXJOB, "mnist", "default")

    assert len(await hook.list_pods("default", MXJOB.pod_selector("mnist"))) == 8  # the selector alone
    expected = [("SCHEDULER", 0), ("SERVER", 0), ("WORKER", 0), ("WORKER", 1)]
    assert _names(pods) == sorted(mlkube_pod_name("mnist", t, i) for t, i in expected)
    master = await hook.list_job_pods(MXJOB, "mnist", "default", master=True)
    assert _names(master) == [mlkube_pod_name("mnist", "WORKER", 0)]


async def test_children_of_the_edl_controller_are_read_and_cleaned_up(tmp_path, monkeypatch):
    """The emulated EDL controller makes the children (and the built-in controllers their pods)."""
    serve = {"duration": None}
    script = {"trainer": serve, "pserver": serve, "master": serve}
    async with cluster_and_hook(tmp_path, monkeypatch, **edl_cluster_options()) as (cluster, hook):
        await create_job(hook, EDL, scripted_edl_job("fit", script), "default")
        await until(lambda: len(running_pods(cluster)) == 5)  # 2 trainers, 2 pservers, 1 master

        children = await hook.list_children(EDL, "fit", "default")
        assert _names(children[BATCH_JOBS.key]) == ["fit-trainer"]
        assert _names(children[REPLICASETS.key]) == ["fit-master", "fit-pserver"]
        assert _names(children[PODS.key]) == sorted(running_pods(cluster))
        status = EDL.read_status(await hook.get_job(EDL, "fit", "default"), children)
        assert status.state == JobState.RUNNING
        assert {t: (c.desired, c.active) for t, c in status.replicas.items()} == {
            "TRAINER": (2, 2),
            "PSERVER": (2, 2),
            "MASTER": (1, 1),
        }

        assert await delete_job(hook, EDL, "fit", "default") is True
        assert names_in(cluster, PODS) == set()
        assert names_in(cluster, BATCH_JOBS) == names_in(cluster, REPLICASETS) == set()
        assert await hook.get_job(EDL, "fit", "default") is None
