"""The Kubeflow v1 kinds through the provider's operators under Kubeflow's real training operator (v1.9.2,
``$REALTO_BIN``, built by scripts/realkube/build-training-operator.sh) instead of localkube's emulation; the
agent is only the kubelet (scripted runtime). The operator runs as its manifests' ServiceAccount and
ClusterRole, the provider as the ServiceAccount of docs/rbac.md. Every status the job passes through and
every pod version is watched; with ``REALTO_RECORD=1`` each scenario's record (deferrable mode) is written to
tests/fixtures/real-operator/, which tests/operators/test_emulation_vs_real_operator.py holds the emulation
to."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from localkube.realcluster import RealCluster

from airflow_provider_training import operators
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import MODES, in_thread, make_context, manifest, run_operator
from tests.real.conftest import as_documented_account, launch
from tests.real.families_real import open_gate
from tests.real.rbac import bind_documented
from tests.real.real_operator import (
    JOB_LABEL,
    SERVED,
    Api,
    Run,
    has,
    job_name,
    originals_deleted,
    pod_name,
    pod_names,
    run_recorded,
    save,
    scripts_on_pods,
)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="session")
def operator_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A real cluster whose Kubeflow controller is the real training operator, for the session."""
    if not os.environ.get("REALTO_BIN"):
        pytest.fail("needs REALTO_BIN, the training operator's directory: run it with `make test-real`")
    binary = Path(os.environ["REALTO_BIN"]) / "training-operator.v1"
    with launch(tmp_path_factory, "realoperator", training_operator=binary) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def documented_kubeconfig(operator_cluster: RealCluster) -> Path:
    return bind_documented(operator_cluster)


@pytest.fixture
def namespace(
    operator_cluster: RealCluster, documented_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """``kubernetes_default`` as the documented ServiceAccount; returns the documented Role's namespace."""
    return as_documented_account(documented_kubeconfig, monkeypatch)


def run(cluster: RealCluster, namespace: str, case, scenario: str, mode: str = "deferrable") -> Run:
    """The scenario, recorded; saved to tests/fixtures/real-operator/ when ``REALTO_RECORD`` is set."""
    result = run_recorded(
        Api.of(cluster), case, scenario, lambda gate: open_gate(cluster, gate), mode=mode, namespace=namespace
    )
    if os.environ.get("REALTO_RECORD") and mode == "deferrable":
        record = {
            "kind": case.kind,
            "namespace": namespace,
            "script": result.script,
            "statuses": result.seen.statuses,
        }
        save(f"{case.kind.lower()}-{scenario}", {**record, "children": result.children})
    return result


def conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status.get("conditions", [])}


def final(done: Run) -> dict[str, dict]:
    return conditions(done.seen.statuses[-1])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", SERVED, ids=str)
def test_success(operator_cluster, namespace, case, mode, capsys):
    done = run(operator_cluster, namespace, case, "success", mode)

    assert not isinstance(done.outcome, Exception), done.outcome
    assert done.outcome["state"] == "Succeeded"
    assert set(done.outcome["replicas"]) == set(case.replicas)
    assert final(done)["Succeeded"]["status"] == "True"
    assert final(done)["Created"]["status"] == "True"
    assert set(done.children["pods"]) == pod_names(case, job_name(case, "success"))
    out = capsys.readouterr().out.splitlines()
    assert any(f"[{case.master.lower()}" in line and "saved model" in line for line in out)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", SERVED, ids=str)
def test_failure_names_the_replica_and_its_exit_code(operator_cluster, namespace, case, mode):
    done = run(operator_cluster, namespace, case, "failure", mode)

    error = done.outcome
    assert isinstance(error, TrainingJobError), error
    message = str(error)
    assert error.status == "failed"
    assert "exit code 3" in message and "RuntimeError: shard 7 is corrupt" in message
    assert case.master.lower() in message.lower()
    assert final(done)["Failed"]["status"] == "True"
    print(json.dumps(final(done)["Failed"]))


@pytest.mark.parametrize("case", SERVED, ids=str)
def test_restarting_then_success(operator_cluster, namespace, case, capsys):
    done = run(operator_cluster, namespace, case, "restart")

    assert not isinstance(done.outcome, Exception), done.outcome
    assert done.outcome["state"] == "Succeeded"
    restarted = pod_name(case, job_name(case, "restart"), case.restarting, 0)
    versions = done.seen.pods[restarted]
    restarting = has(done.seen.statuses, "Restarting")
    if case.kind == "MPIJob":  # the failed worker stays; Restarting is written; the launcher decides
        assert len({uid for uid, _ in versions}) == 1 and versions[-1][1] in ("Failed", "Deleted"), versions
        assert restarting is not None
    else:
        assert len({uid for uid, _ in versions}) == 2, versions  # deleted and recreated once
    if restarting is not None:  # written unless that reconcile's status update conflicted (docs/testing.md)
        assert conditions(done.seen.statuses[restarting])["Restarting"]["reason"] == f"{case.kind}Restarting"
        if case.kind != "MPIJob":  # Running again once the replacement runs
            assert has(done.seen.statuses[restarting:], "Running") is not None
    assert final(done)["Succeeded"]["status"] == "True"
    print(f"Restarting condition written: {restarting is not None}")


@pytest.mark.parametrize(
    ("scenario", "because"),
    [
        ("backoff", "it has reached the specified backoff limit"),
        ("deadline", "it was active longer than specified deadline"),
    ],
)
@pytest.mark.parametrize("case", SERVED, ids=str)
def test_run_policy_limit_fails_the_job(operator_cluster, namespace, case, scenario, because):
    done = run(operator_cluster, namespace, case, scenario)

    error = done.outcome
    assert isinstance(error, TrainingJobError), error
    assert error.status == "failed"
    failed = final(done)["Failed"]
    assert failed["reason"] == f"{case.kind}Failed"
    assert failed["message"] == f"Job {job_name(case, scenario)} has failed because {because}"
    assert because in str(error)
    assert all(originals_deleted(done.seen)), done.seen.pods  # every pod deleted (some may be made again)
    print(f"pods made again after the failure: {sorted(done.children['pods'])}")


@pytest.mark.parametrize("policy", ["Running", "All"])
@pytest.mark.parametrize("case", SERVED, ids=str)
def test_clean_pod_policy(operator_cluster, namespace, case, policy, capsys):
    scenario = f"clean-{policy.lower()}"
    done = run(operator_cluster, namespace, case, scenario)

    assert not isinstance(done.outcome, Exception), done.outcome
    assert done.outcome["state"] == "Succeeded"
    name = job_name(case, scenario)
    deciding = {pod_name(case, name, case.master, i) for i in range(case.replicas[case.master])}
    kept = deciding if policy == "Running" else set()
    assert set(done.children["pods"]) == kept, done.seen.pods
    assert set(done.children["services"]) == (kept if case.kind != "MPIJob" else set())
    out = capsys.readouterr().out.splitlines()
    assert any(f"[{case.master.lower()}" in line and "saved model" in line for line in out)


@pytest.mark.parametrize("case", SERVED, ids=str)
def test_suspend_and_resume_while_waiting(operator_cluster, namespace, case, capsys):
    done = run(operator_cluster, namespace, case, "suspend")

    assert not isinstance(done.outcome, Exception), done.outcome
    assert done.outcome["state"] == "Succeeded"
    suspended = has(done.seen.statuses, "Suspended")
    assert suspended is not None
    resumed = [
        c for s in done.seen.statuses for c in s.get("conditions", []) if c["reason"] == f"{case.kind}Resumed"
    ]
    assert resumed and resumed[0]["type"] == "Suspended" and resumed[0]["status"] == "False"
    for pod in pod_names(case, job_name(case, "suspend")):
        assert len({uid for uid, _ in done.seen.pods[pod]}) == 2  # deleted by the suspension, made again
    out = capsys.readouterr().out
    assert out.index("is suspended (") < out.index("was resumed")


def status_of(cluster: RealCluster, path: str) -> dict:
    """The job's status; {} while it does not exist yet."""
    return (cluster.get_or_none(path) or {}).get("status") or {}


@pytest.mark.parametrize("case", SERVED, ids=str)
def test_deleted_while_waiting_in_sync_mode(operator_cluster, namespace, case):
    name = f"to-{case.plural[:-1]}-deleted"
    job = scripts_on_pods(manifest(case, {"default": {"duration": None}}, name=name, namespace=namespace))
    op = getattr(operators, f"{case.kind}Operator")(task_id="train", job=job, check_interval=0.2)
    path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/{case.plural}/{name}"
    worker, outcome = in_thread(lambda: run_operator(op, make_context(), "sync"))
    operator_cluster.wait_for(lambda: has([status_of(operator_cluster, path)], "Running") == 0, 60)

    operator_cluster.request("DELETE", path)
    worker.join(timeout=90)

    assert isinstance(outcome.get("error"), TrainingJobError), outcome
    assert outcome["error"].status == "deleted"
    selector = f"labelSelector={JOB_LABEL}%3D{name}"
    operator_cluster.wait_for(
        lambda: not operator_cluster.get(f"/api/v1/namespaces/{namespace}/pods?{selector}")["items"], 60
    )
