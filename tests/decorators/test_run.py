"""Decorated training functions run in PyTorchJob replicas on localkube's process runtime (real processes,
localkube's PyTorchJob controller's env), through ``dag.test()``: the real Task SDK, XComs, triggers."""

from __future__ import annotations

import pytest

from tests.decorators.conftest import load_dag
from tests.operators.harness import KIND_BY_NAME, jobs

pytestmark = pytest.mark.timeout(180)

PYTORCH = KIND_BY_NAME["PyTorchJob"]


def output(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    captured = capfd.readouterr()
    return captured.out + captured.err + caplog.text  # where task logs go depends on the set-up order


def job_names(kube) -> set[str]:
    return {job["metadata"]["name"] for job in jobs(kube, PYTORCH)}


@pytest.mark.parametrize("dag_id", ["decorated_sync", "decorated_deferrable"])
def test_the_masters_return_value_is_the_xcom(dag_id, decorated_db, process_cluster, capfd, caplog):
    before = job_names(process_cluster)
    dag = load_dag(dag_id)

    run = dag.test()

    assert run.state == "success"
    value = run.get_task_instance("whoami").xcom_pull(task_ids="whoami")
    master, port = value.pop("master").split(":")
    assert value == {
        "rank": 0,
        "world_size": 2,
        "tag": "from-upstream",  # an XComArg, resolved before the payload was built
        "scaled": 2.5,
        "note": f"run {run.run_id}",  # a template, rendered
    }
    assert master and int(port) > 0
    out = output(capfd, caplog)
    assert "[master-0] rank 0 of 2 ran whoami" in out
    assert "[worker-0] rank 1 of 2 ran whoami" in out
    if dag_id == "decorated_deferrable":
        assert "[DAG TEST] running trigger in line" in out
    assert job_names(process_cluster) == before  # on_finish_action="delete", after the value was read


def test_an_exception_fails_the_task_naming_the_replica_with_its_traceback(
    decorated_db, process_cluster, capfd, caplog
):
    run = load_dag("decorated_raises").test()

    assert run.state == "failed"
    out = output(capfd, caplog)
    assert "PyTorchJob default/decorated-raises-" in out and "because 1 Master replica(s) failed" in out
    assert "master-0 (pod decorated-raises-" in out and "exit code 1" in out
    # The traceback shows the function's own line, from the shipped source.
    assert 'File "<task.pytorch_job raises>", line 6, in raises' in out
    assert "|     raise RuntimeError(message)" in out
    assert "RuntimeError: no shard for this rank" in out


def test_a_return_value_that_is_not_json_fails_the_master(decorated_db, process_cluster, capfd, caplog):
    run = load_dag("decorated_bad_return").test()

    assert run.state == "failed"
    out = output(capfd, caplog)
    assert "master-0 (pod decorated-bad-return-" in out and "exit code 1" in out
    assert "the return value of returns_a_set() is not JSON-serializable" in out


def test_an_argument_that_is_not_json_fails_before_anything_is_submitted(
    decorated_db, process_cluster, capfd, caplog
):
    before = job_names(process_cluster)

    run = load_dag("decorated_bad_argument").test()

    assert run.state == "failed"
    assert run.get_task_instance("upstream_time").state == "success"
    out = output(capfd, caplog)
    assert "@task.pytorch_job whoami(): argument 'tag' is not JSON-serializable" in out
    assert job_names(process_cluster) == before


def test_a_mapped_task_runs_one_job_per_value(decorated_db, process_cluster):
    run = load_dag("decorated_mapped").test()

    assert run.state == "success"
    values = run.get_task_instance("whoami", map_index=0).xcom_pull(task_ids="whoami", map_indexes=[0, 1])
    assert [(v["tag"], v["scaled"], v["world_size"]) for v in values] == [("mapped", 2, 1), ("mapped", 6, 1)]
