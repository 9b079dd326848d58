"""Legacy MXNet spec models: the upstream examples of both operators load unchanged; the operators' rules
(job modes, chief, scheduler, env slots, names) are refused with the field path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_training.kinds import get_kind
from airflow_provider_training.specs import build_job, load_job, parse_job
from airflow_provider_training.specs.kubeflow import MXJob as KubeflowMXJob
from airflow_provider_training.specs.mxnet_legacy import MxJob, MXJobV1Alpha1
from tests.fixtures import examples
from tests.specs.helpers import container, refused

FILES = examples("mxnet-legacy")


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_upstream_example_loads_unchanged(path: Path):
    original = yaml.safe_load(path.read_text())
    expected = MxJob if original["kind"] == "MxJob" else MXJobV1Alpha1
    if expected is MXJobV1Alpha1:  # its jobMode, not in v1alpha1's type, is accepted and not sent
        assert original["spec"].pop("jobMode") == "dist"
    assert load_job(path) == original
    assert type(parse_job(path)) is expected


def entry(
    type_: str | None, replicas: int | None = 1, *containers: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {"spec": {"containers": list(containers) or [container("mxnet")]}},
        **extra,
    }
    if type_ is not None:
        spec["mxReplicaType"] = type_
    if replicas is not None:
        spec["replicas"] = replicas
    return spec


DIST = [entry("SCHEDULER", 1, PsRootPort=9091), entry("SERVER", 2), entry("WORKER", 2)]


def mlkube(*entries: dict[str, Any], mode: str = "dist", **spec: Any) -> dict[str, Any]:
    body = {"jobMode": mode, "replicaSpecs": list(entries or DIST), **spec}
    return {
        "apiVersion": "mxnet.mlkube.io/v1beta1",
        "kind": "MxJob",
        "metadata": {"name": "mx"},
        "spec": body,
    }


def v1alpha1(*entries: dict[str, Any], name: str = "mx", **spec: Any) -> dict[str, Any]:
    body = {"replicaSpecs": list(entries or DIST), **spec}
    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "MXJob", "metadata": {"name": name}, "spec": body}


def test_kind_resolution_keeps_the_three_mxjobs_apart():
    assert type(parse_job(v1alpha1())) is MXJobV1Alpha1
    assert type(parse_job(mlkube())) is MxJob
    kubeflow = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MXJob",
        "spec": {
            "jobMode": "MXTrain",
            "mxReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [container("mxnet")]}}}},
        },
    }
    assert type(parse_job(kubeflow)) is KubeflowMXJob
    assert type(parse_job({**kubeflow, "apiVersion": None})) is KubeflowMXJob
    refused({**kubeflow, "apiVersion": "kubeflow.org/v1beta1"}, "apiVersion", "kubeflow.org/v1alpha1")


@pytest.mark.parametrize("make", [mlkube, v1alpha1], ids=["mlkube", "v1alpha1"])
def test_wrong_replica_type_names_the_allowed_values(make):
    refused(
        make(*DIST[:2], entry("worker", 2)),
        "spec.replicaSpecs[2].mxReplicaType",
        "'SCHEDULER', 'SERVER' or 'WORKER'",
        "'worker'",
    )


@pytest.mark.parametrize("make", [mlkube, v1alpha1], ids=["mlkube", "v1alpha1"])
def test_every_replica_needs_the_mxnet_container(make):
    job = make(*DIST[:2], entry("WORKER", 2, container("main")))
    refused(job, "spec.replicaSpecs[2].template.spec.containers", "'mxnet'")


@pytest.mark.parametrize("make", [mlkube, v1alpha1], ids=["mlkube", "v1alpha1"])
def test_each_type_once_and_one_scheduler(make):
    refused(
        make(*DIST, entry("WORKER", 1)),
        "spec.replicaSpecs[3].mxReplicaType",
        "WORKER is already defined at spec.replicaSpecs[2]",
    )
    refused(
        make(entry("SCHEDULER", 2, PsRootPort=9091), *DIST[1:]),
        "spec.replicaSpecs[0].replicas",
        "exactly 1 for SCHEDULER",
    )


def test_mlkube_job_modes():
    refused(mlkube(mode="distributed"), "spec.jobMode", "'local' or 'dist'")
    refused({**mlkube(), "spec": {"replicaSpecs": DIST}}, "spec.jobMode", "required")
    refused(
        mlkube(entry("SERVER"), entry("WORKER"), mode="local"),
        "spec.replicaSpecs[0].mxReplicaType",
        "must be WORKER in local mode",
    )
    refused(
        mlkube(entry("WORKER", 2), mode="local"), "spec.replicaSpecs[0].replicas", "at most 1 in local mode"
    )
    refused(mlkube(entry("SCHEDULER"), entry("WORKER")), "spec.replicaSpecs", "missing SERVER")
    local = mlkube(entry(None, None), mode="local")  # type and replicas default to WORKER and 1
    assert load_job(copy.deepcopy(local)) == local


def test_env_the_operators_overwrite():
    short = [{"name": "A", "value": "1"}]
    dist = mlkube(*DIST[:2], entry("WORKER", 2, {**container("mxnet"), "env": short}))
    refused(dist, "spec.replicaSpecs[2].template.spec.containers[0].env", "at least 5 entries", "got 1")
    padded = [{"name": f"P{i}", "value": ""} for i in range(5)]
    assert load_job(mlkube(*DIST[:2], entry("WORKER", 2, {**container("mxnet"), "env": padded})))
    local = mlkube(entry("WORKER", 1, {**container("mxnet"), "env": short}), mode="local")
    assert load_job(local)  # local mode sets no env
    sidecar = v1alpha1(
        *DIST[:2], entry("WORKER", 2, container("mxnet"), {**container("sidecar"), "env": short * 5})
    )
    refused(sidecar, "spec.replicaSpecs[2].template.spec.containers[1].env", "at least 6 entries", "got 5")


def test_v1alpha1_rules():
    refused(
        v1alpha1(entry("SCHEDULER"), *DIST[1:]),
        "spec.replicaSpecs[0].PsRootPort",
        "required for the SCHEDULER",
    )
    refused(v1alpha1(*DIST[:1], DIST[2]), "spec.replicaSpecs", "missing SERVER")
    refused(
        v1alpha1(terminationPolicy={"chief": {"replicaName": "WORKER", "replicaIndex": 2}}),
        "spec.terminationPolicy.chief.replicaIndex",
        "below WORKER's 2 replicas",
    )
    refused(
        v1alpha1(terminationPolicy={"chief": {"replicaName": "CHIEF"}}),
        "spec.terminationPolicy.chief.replicaName",
        "'SCHEDULER', 'SERVER' or 'WORKER'",
    )
    refused(v1alpha1(cleanupPodPolicy="Finished"), "spec.cleanupPodPolicy", "'All', 'Running' or 'None'")
    refused(v1alpha1(name="a" * 41), "metadata.name", "at most 40 characters", "DMLC_PS_ROOT_URI")
    assert parse_job(v1alpha1(name="a" * 40)).name_limit() == 40


def test_runtime_id_is_part_of_the_object_names():
    refused(mlkube(RuntimeId="AB_1"), "spec.RuntimeId", "lower-case")
    assert parse_job(mlkube()).name_limit() == 63 - len("-scheduler-xxxx-0")
    assert parse_job(mlkube(RuntimeId="run-2026-03")).name_limit() == 63 - len("-scheduler-run-2026-03-0")
    long_name = {**mlkube(), "metadata": {"name": "m" * 50}}
    refused(long_name, "metadata.name", "at most 46 characters")


def test_builder_packs_the_replica_list():
    kind = get_kind("MxJob")
    job = build_job(
        kind,
        "mx:1",
        ["python", "train.py"],
        {"SCHEDULER": 1, "SERVER": 1, "WORKER": 2},
        spec={"jobMode": "dist"},
    )
    assert [(e["mxReplicaType"], e["replicas"]) for e in job["spec"]["replicaSpecs"]] == [
        ("SCHEDULER", 1),
        ("SERVER", 1),
        ("WORKER", 2),
    ]
    assert job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["name"] == "mxnet"
