"""The Kubeflow v1 kinds through the provider's operators under Kubeflow's real training operator (v1.9.2,
``$REALTO_BIN``, built by scripts/realkube/build-training-operator.sh) instead of localkube's emulation; the
agent is only the kubelet (scripted runtime). Every status the job passes through is watched; with
``REALTO_RECORD=1`` each scenario's record is written to tests/fixtures/real-operator/."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from localkube.pytest_plugin import connection_json
from localkube.realcluster import RealCluster

from airflow_provider_training import operators
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import KINDS, make_context, manifest, run_operator
from tests.real.conftest import launch
from tests.real.real_operator import children, recording, save, scripts_on_pods

pytestmark = pytest.mark.timeout(240)
# MXJob was removed in v1.9.0: nothing serves it.
SERVED = [case for case in KINDS if case.kind != "MXJob"]
NAMESPACE = "default"


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


def operator_for(case, name: str, script: dict):
    cls = getattr(operators, f"{case.kind}Operator")
    job = scripts_on_pods(manifest(case, script, name=name, namespace=NAMESPACE))
    return cls(task_id="train", job=job, check_interval=0.2, log_replicas="all")


def run_recorded(cluster: RealCluster, case, name: str, script: dict, scenario: str):
    """Run the operator (deferrable) while watching the job; delete the job after. Returns the operator's
    result or error, the status record and the children the operator saw."""
    path = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/{case.plural}/{name}"
    with recording(cluster, case.plural, NAMESPACE, name) as record:
        try:
            outcome: object = run_operator(operator_for(case, name, script), make_context(), "deferrable")
        except TrainingJobError as err:
            outcome = err
        made = children(cluster, NAMESPACE, name)
        cluster.request("DELETE", path)
    if os.environ.get("REALTO_RECORD"):
        save(
            scenario,
            {"kind": case.kind, "script": script, "statuses": record.statuses, "children": made},
        )
    return outcome, record, made


def pod_names(case, name: str) -> set[str]:
    """``<job>-<type>-<index>``; the MPIJob launcher is ``<job>-launcher``."""
    return {
        f"{name}-launcher" if (case.kind, t) == ("MPIJob", "Launcher") else f"{name}-{t.lower()}-{i}"
        for t, n in case.replicas.items()
        for i in range(n)
    }


def conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status.get("conditions", [])}


@pytest.mark.parametrize("case", SERVED, ids=str)
def test_success(operator_conn, case):
    name = f"to-{case.plural[:-1]}-ok"
    script = {"default": {"duration": 0.5, "logs": ["{type}-{index} saved model"]}}

    result, record, made = run_recorded(operator_conn, case, name, script, f"{case.kind.lower()}-success")

    assert not isinstance(result, Exception), result
    assert result["state"] == "Succeeded"
    assert set(result["replicas"]) == set(case.replicas)
    final = conditions(record.statuses[-1])
    assert final["Succeeded"]["status"] == "True"
    assert final["Created"]["status"] == "True"
    assert set(made["pods"]) == pod_names(case, name)


@pytest.mark.parametrize("case", SERVED, ids=str)
def test_failure_names_the_replica_and_its_exit_code(operator_conn, case):
    name = f"to-{case.plural[:-1]}-fail"
    script = {
        "default": {"duration": 5},
        case.master: {"duration": 0.2, "exit_code": 3, "logs": ["RuntimeError: shard 7 is corrupt"]},
    }

    error, record, _ = run_recorded(operator_conn, case, name, script, f"{case.kind.lower()}-failure")

    assert isinstance(error, TrainingJobError), error
    message = str(error)
    assert error.status == "failed"
    assert "exit code 3" in message and "RuntimeError: shard 7 is corrupt" in message
    assert case.master.lower() in message.lower()
    failed = conditions(record.statuses[-1])["Failed"]
    assert failed["status"] == "True"
    print(json.dumps(failed))
