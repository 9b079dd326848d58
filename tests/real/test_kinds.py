"""Every Kubeflow v1 kind, in sync and deferrable mode, to success and to failure on the real API server: the
upstream CRDs (with their CEL rules) admit what the provider builds, and the agent's operator emulation runs
it there. Then each kind again as the ServiceAccount bound to exactly the Role of docs/rbac.md."""

from __future__ import annotations

import pytest

from airflow_provider_training import operators
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import KINDS, MODES, make_context, manifest, run_operator

pytestmark = pytest.mark.timeout(180)


def operator_for(case, name: str, script: dict, namespace: str = "default", **kwargs):
    cls = getattr(operators, f"{case.kind}Operator")
    job = manifest(case, script, name=name, namespace=namespace)
    return cls(task_id="train", job=job, check_interval=0.2, log_replicas="all", **kwargs)


def logged(out: str) -> list[str]:
    """The task log's messages (what follows the level); the later lines of a record of several (the replica
    lines of one read, ``[master-0] ...``) as they are."""
    lines = [line for line in out.splitlines() if "] " in line]
    return [line if line.startswith("[") else line.split("] ", 1)[1] for line in lines]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", KINDS, ids=str)
def test_success(real_cluster, admin_conn, case, mode, capsys):
    script = {"default": {"duration": 0.3, "logs": ["{type}-{index} saved model"]}}

    result = run_operator(
        operator_for(case, f"kinds-{case.plural[:-1]}-{mode[:5]}", script), make_context(), mode
    )

    assert result["state"] == "Succeeded"
    assert set(result["replicas"]) == set(case.replicas)
    out = capsys.readouterr().out
    assert any(line.startswith(f"[{case.master.lower()}") and "saved model" in line for line in logged(out))


@pytest.mark.parametrize("case", KINDS, ids=str)
def test_failure_names_the_deciding_replica_and_its_exit_code(real_cluster, admin_conn, case):
    script = {
        "default": {"duration": 2},
        case.master: {"duration": 0.2, "exit_code": 3, "logs": ["RuntimeError: shard 7 is corrupt"]},
    }

    with pytest.raises(TrainingJobError) as failure:
        run_operator(
            operator_for(case, f"kinds-{case.plural[:-1]}-fail", script), make_context(), "deferrable"
        )

    message = str(failure.value)
    assert failure.value.status == "failed"
    assert "exit code 3" in message and "RuntimeError: shard 7 is corrupt" in message
    assert case.master.lower() in message.lower()


@pytest.mark.parametrize("case", KINDS, ids=str)
def test_as_the_documented_role_to_success_and_deletion(real_cluster, sa_conn, case, capsys):
    script = {"default": {"duration": 0.3, "logs": ["{type}-{index} saved model"]}}
    op = operator_for(case, f"rbac-{case.plural[:-1]}", script, namespace=sa_conn, on_finish_action="delete")

    result = run_operator(op, make_context(), "deferrable")

    assert result["state"] == "Succeeded" and result["namespace"] == sa_conn
    out = capsys.readouterr().out
    assert any("saved model" in line for line in logged(out))
    assert "forbidden" not in out.lower()
    real_cluster.wait_for(
        lambda: not real_cluster.get(f"/apis/kubeflow.org/v1/namespaces/{sa_conn}/{case.plural}")["items"], 60
    )


@pytest.mark.parametrize("case", KINDS, ids=str)
def test_as_the_documented_role_a_failure_names_the_replica(real_cluster, sa_conn, case):
    script = {
        "default": {"duration": 2},
        case.master: {"duration": 0.2, "exit_code": 3, "logs": ["bad shard"]},
    }
    op = operator_for(case, f"rbac-{case.plural[:-1]}-fail", script, namespace=sa_conn)

    with pytest.raises(TrainingJobError) as failure:
        run_operator(op, make_context(), "sync")

    message = str(failure.value)
    assert "exit code 3" in message and "bad shard" in message and "forbidden" not in message.lower()
