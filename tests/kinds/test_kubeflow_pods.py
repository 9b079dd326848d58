from __future__ import annotations

import pytest

from airflow_provider_training.kinds import ReplicaPod, get_kind

PREFIX = "training.kubeflow.org/"


def pod(name: str, **labels: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {PREFIX + k.replace("_", "-"): v for k, v in labels.items()}}
    }


@pytest.mark.parametrize(
    ("kind", "labels", "expected"),
    [
        ("TFJob", {"replica_type": "ps", "replica_index": "1"}, ("PS", 1)),
        ("TFJob", {"replica_type": "chief", "replica_index": "0", "job_role": "master"}, ("Chief", 0)),
        ("TFJob", {"replica_type": "evaluator", "replica_index": "0"}, ("Evaluator", 0)),
        ("PyTorchJob", {"replica_type": "worker", "replica_index": "3"}, ("Worker", 3)),
        ("MXJob", {"replica_type": "tunertracker", "replica_index": "0"}, ("TunerTracker", 0)),
        ("XGBoostJob", {"replica_type": "master", "replica_index": "0"}, ("Master", 0)),
        ("PaddleJob", {"replica_type": "worker", "replica_index": "1"}, ("Worker", 1)),
        ("JAXJob", {"replica_type": "worker", "replica_index": "0"}, ("Worker", 0)),
        # The MPIJob v1 launcher is a bare pod <job>-launcher without a replica-index label.
        ("MPIJob", {"replica_type": "launcher", "job_role": "master"}, ("Launcher", None)),
        ("MPIJob", {"replica_type": "worker", "replica_index": "2"}, ("Worker", 2)),
    ],
)
def test_replica_of_pod(kind, labels, expected):
    replica = get_kind(kind).replica_of_pod(pod("p-0", job_name="p", **labels))
    assert replica == ReplicaPod(expected[0], expected[1], "p-0")


def test_unknown_or_missing_labels_do_not_raise():
    kind = get_kind("PyTorchJob")
    assert kind.replica_of_pod(pod("x", replica_type="launcher", replica_index="a")) == ReplicaPod(
        "launcher", None, "x"
    )
    assert kind.replica_of_pod({"metadata": {"name": "y"}}) == ReplicaPod("", None, "y")


@pytest.mark.parametrize(
    ("kind", "controller"),
    [
        ("TFJob", "tfjob-controller"),
        ("PyTorchJob", "pytorchjob-controller"),
        ("MXJob", "mxjob-controller"),
        ("XGBoostJob", "xgboostjob-controller"),
        ("PaddleJob", "paddlejob-controller"),
        ("MPIJob", "mpijob-controller"),
        ("JAXJob", "jaxjob-controller"),
    ],
)
def test_selectors_name_the_job_and_the_kinds_operator(kind, controller):
    job_kind = get_kind(kind)
    assert job_kind.pod_selector("train") == (f"{PREFIX}job-name=train,{PREFIX}operator-name={controller}")
    assert job_kind.master_selector("train") == (
        f"{PREFIX}job-name=train,{PREFIX}operator-name={controller},{PREFIX}job-role=master"
    )


def test_same_named_jobs_of_two_kinds_have_disjoint_selectors():
    assert get_kind("TFJob").pod_selector("a") != get_kind("PyTorchJob").pod_selector("a")
