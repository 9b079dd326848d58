"""The EDL, legacy MXNet, T9k, MPI Operator v2beta1 and Trainer v2 TrainJob sensors against localkube, in
poke and deferrable mode: each waits for an existing job's success and fails, naming the deciding replica's
exit code, when the job fails."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_training.results import TrainingJobSensorError
from tests.operators.families import LOCAL_CASES, TORCH_RUNTIME, TRAINJOB_CASE, family_cluster, kill
from tests.operators.harness import MODES, NAMESPACE, make_context, run_operator

__all__ = ["family_cluster"]
pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine


def create(kube, case, name, script, **spec):
    resource = case.job_kind.resource
    rt = kube.store.resource_type(resource.group, resource.version, resource.plural)
    job = case.manifest(script, name=name)
    job["spec"].update(spec)
    kube.store.create(rt, NAMESPACE, job)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", LOCAL_CASES, ids=str)
def test_waits_for_success(family_cluster, case, mode):
    name = f"ok-{case.id.lower()}-{mode[:4]}"
    script = {"default": {"duration": 0, "gate": name}}  # the job ends once the sensor deferred
    if case.decider == "trainer":  # EDL: the ReplicaSet pods run until deleted
        script = {"default": {"duration": None}, "trainer": {"duration": 0, "gate": name}}
    create(family_cluster, case, name, script)

    result = run_operator(case.make_sensor(name), make_context(), mode, gate=name)

    assert result["state"] == "Succeeded" and result["name"] == name  # the XCom value, in both modes
    asyncio.run(kill(case, name))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", LOCAL_CASES, ids=str)
def test_failure_names_the_deciding_replica(family_cluster, case, mode):
    name = f"fails-{case.id.lower()}-{mode[:4]}"
    script = {"default": {"duration": None}, case.decider: {"duration": 0, "exit_code": 4, "gate": name}}
    spec = {}
    if mode == "sync" and case.job_kind.api_version == "kubeflow.org/v1alpha1":
        # A poke sees the job only once it ended; by then the default cleanupPodPolicy All has deleted the
        # chief's pod, and with it its exit code (a deferred wait watches the pod while it runs).
        spec["cleanupPodPolicy"] = "None"
    if mode == "sync" and case is TRAINJOB_CASE:
        # Likewise: under JobSet's default restartPolicy OnFailure the failing node restarts until its Job's
        # backoffLimit, then the Job controller deletes its pod; a runtime whose pods never restart keeps it.
        spec["runtimeRef"] = {"name": f"{TORCH_RUNTIME['metadata']['name']}-never"}
    create(family_cluster, case, name, script, **spec)

    with pytest.raises(TrainingJobSensorError) as failure:
        run_operator(case.make_sensor(name), make_context(), mode, gate=name)

    message = str(failure.value).lower()
    assert f"{case.decider_text} (pod " in message and "exit code 4" in message
    asyncio.run(kill(case, name))
