"""Suspend and resume through the kind's own field: T9k pause/resume while an operator waits (both modes),
Kubeflow runPolicy.suspend, the MPI Operator's v2beta1 MPIJob and the Trainer v2 TrainJob while an operator
waits, and a clear refusal for APIs that cannot pause, before any request."""

from __future__ import annotations

import asyncio

import pytest
from localkube.gates import open_gate

from airflow_provider_training.operators import (
    T9kPauseJobOperator,
    T9kResumeJobOperator,
    TrainingJobResumeOperator,
    TrainingJobSuspendOperator,
)
from tests.operators.families import (
    CASES,
    MPI_OPERATOR_CASE,
    TRAINJOB_CASE,
    family_cluster,
    job_or_none,
    kill,
    replica_pods,
    running,
)
from tests.operators.harness import (
    KIND_BY_NAME,
    MODES,
    NAMESPACE,
    in_thread,
    make_context,
    manifest,
    run_operator,
    wait_for,
)

__all__ = ["family_cluster"]
pytestmark = pytest.mark.timeout(120)  # a hang guard, generous for a busy machine
T9K_PYTORCH = next(case for case in CASES if case.id == "T9k-PyTorchTrainingJob")


def phase(kube, case, name):
    return ((job_or_none(kube, case, name) or {}).get("status") or {}).get("phase")


@pytest.mark.parametrize("mode", MODES)
def test_t9k_job_paused_and_resumed_while_an_operator_waits(family_cluster, mode, capsys):
    # The first run of each replica lasts until its pod is deleted (by the pause); the rerun succeeds.
    script = {"default": {"attempts": [{"duration": None}, {"duration": 0.2}]}}
    op = T9K_PYTORCH.make_operator(script)
    worker, outcome = in_thread(lambda: run_operator(op, make_context(), mode))
    name = wait_for(
        lambda: op._job_ref and running(family_cluster, T9K_PYTORCH, op._job_ref.name) and op._job_ref.name
    )

    paused = T9kPauseJobOperator(task_id="pause", job_name=name, kind="PyTorchTrainingJob").execute(
        make_context()
    )
    wait_for(lambda: phase(family_cluster, T9K_PYTORCH, name) == "Paused")
    wait_for(lambda: not replica_pods(family_cluster, T9K_PYTORCH, name))
    resumed = T9kResumeJobOperator(task_id="resume", job_name=name, kind="PyTorchTrainingJob").execute(
        make_context()
    )
    worker.join()

    assert (paused["name"], resumed["name"]) == (name, name)
    assert outcome.get("result", {}).get("state") == "Succeeded", outcome
    out = capsys.readouterr().out
    assert out.index("is suspended (") < out.index("was resumed")
    job = job_or_none(family_cluster, T9K_PYTORCH, name)
    assert job["spec"]["runMode"]["pause"]["enabled"] is False
    asyncio.run(kill(T9K_PYTORCH, name))


def test_kubeflow_job_suspended_and_resumed(family_cluster):
    case = KIND_BY_NAME["PyTorchJob"]
    rt = family_cluster.store.resource_type("kubeflow.org", "v1", case.plural)
    family_cluster.store.create(
        rt, NAMESPACE, manifest(case, {"default": {"duration": None}}, name="to-suspend")
    )

    def condition(type_):
        job = family_cluster.store.get(rt, NAMESPACE, "to-suspend")
        return any(
            c["type"] == type_ and c["status"] == "True"
            for c in (job.get("status") or {}).get("conditions", [])
        )

    wait_for(lambda: condition("Running"))
    suspended = TrainingJobSuspendOperator(
        task_id="suspend", job_name="to-suspend", kind="PyTorchJob"
    ).execute(make_context())
    wait_for(lambda: condition("Suspended"))
    TrainingJobResumeOperator(task_id="resume", job_name="to-suspend", kind="PyTorchJob").execute(
        make_context()
    )
    wait_for(lambda: condition("Running") and not condition("Suspended"))

    assert suspended["kind"] == "PyTorchJob" and suspended["name"] == "to-suspend"
    assert family_cluster.store.get(rt, NAMESPACE, "to-suspend")["spec"]["runPolicy"]["suspend"] is False
    family_cluster.store.delete(rt, NAMESPACE, "to-suspend")


# Per case: the script selector whose gate ends the job (`default`: every replica must finish) and the
# reason of the Suspended=False condition the controller writes on resume.
SUSPENDABLE = [(MPI_OPERATOR_CASE, "launcher", "MPIJobResumed"), (TRAINJOB_CASE, "default", "Resumed")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("case", "ending", "resumed_reason"), SUSPENDABLE, ids=lambda v: str(v))
def test_job_suspended_and_resumed_while_an_operator_waits(
    family_cluster, case, ending, resumed_reason, mode, capsys
):
    """The v2beta1 MPIJob on localkube's MPI Operator, and the TrainJob on its Trainer and JobSet controllers:
    suspending deletes the pods (the MPI launcher's, the TrainJob's nodes: their batch Jobs are suspended),
    resuming runs them again, and the waiting operator sees the job through to success."""
    gate = f"{case.id}-resumed-{mode}"
    script = {"default": {"duration": None}, ending: {"duration": 0, "gate": gate}}
    op = case.make_operator(script)
    worker, outcome = in_thread(lambda: run_operator(op, make_context(), mode))
    name = wait_for(
        lambda: op._job_ref and running(family_cluster, case, op._job_ref.name) and op._job_ref.name
    )
    kind = case.job_kind
    control = {"job_name": name, "kind": kind.kind, "api_version": kind.api_version}

    TrainingJobSuspendOperator(task_id="suspend", **control).execute(make_context())
    wait_for(lambda: not replica_pods(family_cluster, case, name))
    TrainingJobResumeOperator(task_id="resume", **control).execute(make_context())
    wait_for(lambda: running(family_cluster, case, name))
    open_gate(gate)
    worker.join()

    assert outcome.get("result", {}).get("state") == "Succeeded", outcome
    conditions = job_or_none(family_cluster, case, name)["status"]["conditions"]
    suspended = next(c for c in conditions if c["type"] == "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("False", resumed_reason)
    assert f"{kind.kind} default/{name} is Suspended" in capsys.readouterr().out  # the waiter saw it


@pytest.mark.parametrize("case", [c for c in CASES if not c.t9k], ids=str)
@pytest.mark.parametrize("operator", [TrainingJobSuspendOperator, TrainingJobResumeOperator])
def test_apis_without_a_suspend_field_are_refused_before_any_request(family_cluster, case, operator):
    kind = case.job_kind
    op = operator(task_id="suspend", job_name="any", kind=kind.kind, api_version=kind.api_version)
    requests = len(family_cluster.requests)

    with pytest.raises(ValueError, match="cannot be suspended or resumed"):
        op.execute(make_context())

    assert len(family_cluster.requests) == requests


def test_suspend_needs_a_kind():
    with pytest.raises(ValueError, match="kind is required"):
        T9kPauseJobOperator(task_id="pause", job_name="any")


def test_resume_is_not_a_kind_of_suspend():
    """Resuming is no special case of suspending: both share a base, and neither is the other."""
    from airflow_provider_training.operators.control import TrainingJobControlOperator

    assert not issubclass(TrainingJobResumeOperator, TrainingJobSuspendOperator)
    assert not issubclass(T9kResumeJobOperator, TrainingJobSuspendOperator)
    for cls in (
        TrainingJobSuspendOperator,
        TrainingJobResumeOperator,
        T9kPauseJobOperator,
        T9kResumeJobOperator,
    ):
        assert issubclass(cls, TrainingJobControlOperator)
    assert (TrainingJobSuspendOperator.suspend, TrainingJobResumeOperator.suspend) == (True, False)
