"""What the task reads from the deciding replica's log, on localkube's scripted runtime (each replica's log is
scripted, whatever its command)."""

from __future__ import annotations

import pytest

from tests.decorators.conftest import load_dag
from tests.examples.conftest import scripted_cluster

__all__ = ["scripted_cluster"]

pytestmark = pytest.mark.timeout(180)


def test_the_last_return_value_line_of_the_masters_log_is_the_xcom(decorated_db, scripted_cluster):
    run = load_dag("scripted_value", "scripted").test()

    assert run.state == "success"
    assert run.get_task_instance("train").xcom_pull(task_ids="train") == {"loss": 0.25}


def test_a_success_without_a_return_value_line_fails_the_task_naming_the_pod(
    decorated_db, scripted_cluster, capfd, caplog
):
    run = load_dag("scripted_no_value", "scripted").test()

    assert run.state == "failed"
    captured = capfd.readouterr()
    out = captured.out + captured.err + caplog.text
    assert "ReturnValueMissing: PyTorchJob default/scripted-no-value-train-" in out
    assert "succeeded but its deciding replica's pod (scripted-no-value-train-" in out
    assert "-master-0) logged no return value" in out
