"""Default job names and identity labels (pure)."""

from __future__ import annotations

import re

import pytest

from airflow_provider_training import naming
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.submission import JobSubmitter

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
KINDS = ["TFJob", "PyTorchJob", "MXJob", "XGBoostJob", "PaddleJob", "MPIJob", "JAXJob"]
IDENTITIES = [
    naming.TaskIdentity("etl", "train", "manual__2026-11-29T12:00:00+00:00"),
    naming.TaskIdentity("A" * 250, "group.Sub_Task" * 20, "scheduled__" + "x" * 200, map_index=12345),
    naming.TaskIdentity("9_starts_with_digit", "__", "r", map_index=0),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("identity", IDENTITIES, ids=["plain", "long", "odd"])
def test_default_name_fits_every_replica_pod_name(kind, identity):
    job_kind = get_kind(kind)
    name = naming.default_job_name(identity, job_kind.replica_types)

    assert DNS_1035.match(name)
    longest = max(job_kind.replica_types, key=len).lower()
    assert len(f"{name}-{longest}-99999") <= 63
    assert naming.default_job_name(identity, job_kind.replica_types) == name  # deterministic


def test_names_differ_per_run_and_map_index():
    base = IDENTITIES[0]
    others = [
        naming.TaskIdentity(base.dag_id, base.task_id, "manual__other"),
        naming.TaskIdentity(base.dag_id, base.task_id, base.run_id, map_index=3),
    ]
    names = {naming.default_job_name(i, ["Worker"]) for i in [base, *others]}
    assert len(names) == 3


def test_retries_share_the_name_and_labels():
    first = naming.TaskIdentity("d", "t", "r", try_number=1)
    retry = naming.TaskIdentity("d", "t", "r", try_number=3)
    assert naming.default_job_name(first, ["Worker"]) == naming.default_job_name(retry, ["Worker"])
    assert first.labels() == retry.labels() and first.annotations() != retry.annotations()


@pytest.mark.parametrize("identity", IDENTITIES, ids=["plain", "long", "odd"])
def test_identity_labels_are_valid_and_select_the_owner(identity):
    labels = identity.labels()
    assert all(LABEL_VALUE.match(v) and len(v) <= 63 for v in labels.values())
    assert identity.owns({"metadata": {"labels": {**labels, "other": "x"}}})
    assert not identity.owns({"metadata": {"labels": {**labels, naming.MAP_INDEX: "7"}}})


def test_long_label_values_keep_a_hash_of_the_original():
    assert naming.label_value("a" * 70) != naming.label_value("a" * 71)
    assert naming.label_value("fine-value") == "fine-value"


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("Upper", "DNS-1035"),
        ("1abc", "DNS-1035"),
        ("ends-", "DNS-1035"),
        ("a" * 60, "at most 50"),
        ("ok-1", None),
    ],
)
def test_name_problem(name, problem):
    found = naming.name_problem(name, 50)
    assert (found is None) if problem is None else (problem in found)


def test_the_default_name_keeps_within_the_jobs_own_limit():
    """A kind whose API allows shorter names than its pod names would (the v1alpha1 MXJob: 40) gets a default
    name the one job-name check accepts; before, the default was cut to the pod-name room only (47)."""
    from tests.specs.test_mxnet_legacy import v1alpha1

    identity = IDENTITIES[1]
    submitter = JobSubmitter(kubernetes_conn_id=None)
    body = v1alpha1()
    del body["metadata"]

    _, prepared = submitter.prepare(
        body,
        kind=None,
        api_version=None,
        job_name=None,
        namespace=None,
        identity=identity,
        labels={},
        annotations={},
    )

    name = prepared["metadata"]["name"]
    assert len(name) == 40 and naming.name_problem(name, 40) is None
    assert name == naming.default_job_name(
        identity, get_kind("MXJob", "kubeflow.org/v1alpha1").replica_types, limit=40
    )


def test_the_spec_and_the_submitter_check_a_name_alike():
    """One job-name check: ``metadata.name`` in a spec and the name the submitter sends read the same."""
    from airflow_provider_training.specs.common import name_errors

    for name in ("Bad_Name", "a" * 64):
        assert name_errors(name, []) == [("metadata.name", naming.name_problem(name, 63))]
