"""The Kubeflow v1 kinds through the provider's operators under Kubeflow's real training operator (v1.9.2,
``$REALTO_BIN``, built by scripts/realkube/build-training-operator.sh) instead of localkube's emulation; the
agent is only the kubelet (scripted runtime). Every status the job passes through is watched; with
``REALTO_RECORD=1`` each scenario's record is written to tests/fixtures/real-operator/."""

from __future__ import annotations

import json
import os
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
from localkube.pytest_plugin import connection_json
from localkube.realcluster import RealCluster

from airflow_provider_training import operators
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import in_thread, make_context, manifest, run_operator
from tests.real.conftest import launch
from tests.real.families_real import open_gate
from tests.real.real_operator import (
    JOB_LABEL,
    NAMESPACE,
    RESTARTING_KINDS,
    SERVED,
    Api,
    Run,
    has,
    job_name,
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


@pytest.fixture
def operator_conn(operator_cluster: RealCluster, monkeypatch: pytest.MonkeyPatch) -> RealCluster:
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection_json(operator_cluster.kubeconfig))
    return operator_cluster


def run(cluster: RealCluster, case, scenario: str) -> Run:
    """The scenario, recorded; saved to tests/fixtures/real-operator/ when ``REALTO_RECORD`` is set."""
    result = run_recorded(Api.of(cluster), case, scenario, lambda gate: open_gate(cluster, gate))
    if os.environ.get("REALTO_RECORD"):
        record = {"kind": case.kind, "script": result.script, "statuses": result.record.statuses}
        save(f"{case.kind.lower()}-{scenario}", {**record, "children": result.children})
    return result


def pod_names(case, name: str) -> set[str]:
    """``<job>-<type>-<index>``; the MPIJob launcher is ``<job>-launcher``."""
    return {
        f"{name}-launcher" if (case.kind, t) == ("MPIJob", "Launcher") else f"{name}-{t.lower()}-{i}"
        for t, n in case.replicas.items()
        for i in range(n)
    }


def status_of(cluster: RealCluster, path: str) -> dict:
    """The job's status; {} while it does not exist yet."""
    try:
        return cluster.get(path).get("status") or {}
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return {}
        raise


def conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status.get("conditions", [])}


@pytest.mark.parametrize("case", SERVED, ids=str)
def test_success(operator_conn, case, capsys):
    name = job_name(case, "success")

    done = run(operator_conn, case, "success")
    result, record, made = done.outcome, done.record, done.children

    assert not isinstance(result, Exception), result
    assert result["state"] == "Succeeded"
    assert set(result["replicas"]) == set(case.replicas)
    final = conditions(record.statuses[-1])
    assert final["Succeeded"]["status"] == "True"
    assert final["Created"]["status"] == "True"
    assert set(made["pods"]) == pod_names(case, name)
    out = capsys.readouterr().out.splitlines()
    assert any(f"[{case.master.lower()}" in line and "saved model" in line for line in out)


@pytest.mark.parametrize("case", SERVED, ids=str)
def test_failure_names_the_replica_and_its_exit_code(operator_conn, case):
    done = run(operator_conn, case, "failure")
    error, record = done.outcome, done.record

    assert isinstance(error, TrainingJobError), error
    message = str(error)
    assert error.status == "failed"
    assert "exit code 3" in message and "RuntimeError: shard 7 is corrupt" in message
    assert case.master.lower() in message.lower()
    failed = conditions(record.statuses[-1])["Failed"]
    assert failed["status"] == "True"
    print(json.dumps(failed))


@pytest.mark.parametrize("case", [c for c in SERVED if c.kind in RESTARTING_KINDS], ids=str)
def test_deleted_while_waiting_in_sync_mode(operator_conn, case):
    name = f"to-{case.plural[:-1]}-deleted"
    job = scripts_on_pods(manifest(case, {"default": {"duration": None}}, name=name, namespace=NAMESPACE))
    op = getattr(operators, f"{case.kind}Operator")(task_id="train", job=job, check_interval=0.2)
    path = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/{case.plural}/{name}"
    worker, outcome = in_thread(lambda: run_operator(op, make_context(), "sync"))
    operator_conn.wait_for(lambda: has([status_of(operator_conn, path)], "Running") == 0, 60)

    operator_conn.request("DELETE", path)
    worker.join(timeout=90)

    assert isinstance(outcome.get("error"), TrainingJobError), outcome
    assert outcome["error"].status == "deleted"
    selector = f"labelSelector={JOB_LABEL}%3D{name}"
    operator_conn.wait_for(
        lambda: not operator_conn.get(f"/api/v1/namespaces/{NAMESPACE}/pods?{selector}")["items"], 60
    )
