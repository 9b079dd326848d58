"""The family-specific rules of docs/rbac.md, each removed in turn on the real API server: a fresh
ServiceAccount in a fresh namespace, bound to the documented Role minus that one rule, runs the operation
that needs it, and the task fails with the server's refusal, which names the verb and the resource (none of
these calls is best effort: no refusal is only a warning)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.results import TrainingJobError
from tests.operators.families import FamilyCase
from tests.operators.harness import make_context, run_operator
from tests.real.families_real import (
    FAMILY_CASES,
    delete_everything,
    gate_name,
    open_gate,
    run_until_logged,
)
from tests.real.rbac import bind, documented_rules, without

pytestmark = pytest.mark.timeout(300)
CASE = {case.id: case for case in FAMILY_CASES}
FOREVER = {"default": {"duration": None}}


@pytest.fixture
def role_without(legacy_cluster, monkeypatch) -> Callable[..., str]:
    """Bind a fresh ServiceAccount in a fresh namespace to the documented Role less ``verb`` (every verb when
    None) on ``resources`` of ``group``, and point the default connection at it; returns the namespace."""

    def bind_without(namespace: str, group: str, resources: list[str], verb: str | None = None) -> str:
        rules = documented_rules()
        for resource in resources:
            rules = without(rules, resource, verb, group)
        grant = bind(legacy_cluster, rules, namespace)
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", grant.connection_json)
        return namespace

    return bind_without


def refused(case: FamilyCase, script: dict, error: type[Exception]) -> str:
    """Run the kind's operator (sync) to its failure, an ``error``; the error's text."""
    op = case.make_operator(script)
    with pytest.raises(error) as failure:
        run_operator(op, make_context(), "sync")
    return str(failure.value)


def forbids(text: str, verb: str, resource: str, group: str) -> bool:
    """The provider's wording of a refusal (``Kubernetes refused `<verb>` on `<resource>.<group>```) with
    the real API server's after it (``cannot <verb> resource "<resource>" in API group "<group>"``)."""
    qualified = f"{resource}.{group}" if group else resource
    return (
        f"Kubernetes refused `{verb}` on `{qualified}`" in text
        and f'cannot {verb} resource "{resource}" in API group "{group}"' in text
    )


def test_without_the_mlkube_mxjobs_rule_submitting_an_mxjob_is_refused(legacy_cluster, role_without):
    ns = role_without("minus-mlkube", "mxnet.mlkube.io", ["mxjobs"])

    message = refused(CASE["MxJob-mlkube"], FOREVER, KubeApiError)

    assert forbids(message, "list", "mxjobs", "mxnet.mlkube.io"), message  # the look for an earlier try's job
    assert not legacy_cluster.get(f"/apis/mxnet.mlkube.io/v1beta1/namespaces/{ns}/mxjobs")["items"]


T9K_PLURALS = [
    "tensorflowtrainingjobs",
    "pytorchtrainingjobs",
    "xgboosttrainingjobs",
    "deepspeedjobs",
    "colossalaijobs",
    "mpijobs",
    "genericjobs",
]


def test_without_the_tensorstack_rule_submitting_a_t9k_job_is_refused(legacy_cluster, role_without):
    ns = role_without("minus-t9k", "batch.tensorstack.dev", T9K_PLURALS)

    message = refused(CASE["T9k-PyTorchTrainingJob"], FOREVER, KubeApiError)

    assert forbids(message, "list", "pytorchtrainingjobs", "batch.tensorstack.dev"), message
    assert not legacy_cluster.get(f"/apis/batch.tensorstack.dev/v1beta1/namespaces/{ns}/pytorchtrainingjobs")[
        "items"
    ]


def test_without_the_paddle_trainingjobs_rule_submitting_an_edl_job_is_refused(legacy_cluster, role_without):
    ns = role_without("minus-edl", "paddlepaddle.org", ["trainingjobs"])

    message = refused(CASE["EDL-TrainingJob"], FOREVER, KubeApiError)

    assert forbids(message, "list", "trainingjobs", "paddlepaddle.org"), message
    assert not legacy_cluster.get(f"/apis/paddlepaddle.org/v1/namespaces/{ns}/trainingjobs")["items"]


@pytest.mark.parametrize(
    ("namespace", "group", "resource"),
    [("minus-batch-jobs", "batch", "jobs"), ("minus-replicasets", "apps", "replicasets")],
)
def test_without_an_edl_child_rule_reading_the_edl_status_is_refused(
    legacy_cluster, role_without, namespace, group, resource
):
    ns = role_without(namespace, group, [resource])
    case = CASE["EDL-TrainingJob"]

    message = refused(case, FOREVER, TrainingJobError)

    assert forbids(message, "get", resource, group), message  # the named child the status is read from
    for name in [
        job["metadata"]["name"]
        for job in legacy_cluster.get(f"/apis/paddlepaddle.org/v1/namespaces/{ns}/trainingjobs")["items"]
    ]:
        delete_everything(legacy_cluster, case, name, ns)


def test_without_the_pods_delete_rule_cleanup_of_an_edl_job_is_refused(legacy_cluster, role_without, capsys):
    ns = role_without("minus-pods-delete", "", ["pods"], "delete")
    case = CASE["EDL-TrainingJob"]
    gate = gate_name("rbac-pods-delete")
    script = {
        "default": {"duration": None},
        "trainer": {"duration": 0, "logs": ["saved model"], "gate": gate},
    }
    op = case.make_operator(script, on_finish_action="delete")

    with pytest.raises(KubeApiError) as failure:  # the job succeeded; its cleanup fails the task
        run_until_logged(
            capsys,
            lambda: run_operator(op, make_context(), "sync"),
            ("saved model", lambda: open_gate(legacy_cluster, gate)),
        )

    assert failure.value.status == 403
    assert forbids(str(failure.value), "delete", "pods", ""), failure.value
    delete_everything(legacy_cluster, case, op._job_ref.name, ns)
