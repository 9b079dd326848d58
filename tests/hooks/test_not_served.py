"""A 404 for a resource type the server does not serve (its CRD is not installed) says so; a 404 for one
missing object does not: the first request of a task on a cluster without the training operator's CRD must
tell the user what to install (docs/troubleshooting.md), as the end of a wait already did."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airflow_provider_training.hooks.errors import CRD_HINT, KubeApiError
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.jobs import create_job
from airflow_provider_training.kinds.base import ResourceRef
from airflow_provider_training.kinds.registry import get_kind

NOT_SERVED = ResourceRef("example.org", "v1", "nosuchjobs", "NoSuchJob")


async def test_a_resource_the_server_does_not_serve_names_the_missing_crd(hook: AsyncTrainingJobHook) -> None:
    with pytest.raises(KubeApiError) as caught:
        await hook.list_objects(NOT_SERVED, "default")

    assert caught.value.resource_not_served
    assert str(caught.value).startswith("list nosuchjobs.example.org in namespace default: 404")
    assert str(caught.value).endswith(CRD_HINT)


async def test_a_missing_object_of_a_served_resource_has_no_crd_hint(hook: AsyncTrainingJobHook) -> None:
    with pytest.raises(KubeApiError) as caught:
        await hook.patch_job(
            get_kind("PyTorchJob"), "no-such-job", "default", {"metadata": {"labels": {"a": "b"}}}
        )

    assert caught.value.status == 404 and not caught.value.resource_not_served
    assert "no-such-job" in str(caught.value) and CRD_HINT not in str(caught.value)


def test_the_real_servers_plain_text_answer_counts_as_not_served() -> None:
    """kube-apiserver answers a resource its served group lacks in plain text (tests/real saw it)."""
    error = KubeApiError.from_response(404, b"404 page not found\n", {"Content-Type": "text/plain"})

    assert error.resource_not_served and str(error).endswith(CRD_HINT)


# The v1 MPIJob and the standalone MPI Operator's v2beta1 MPIJob define one CRD name, mpijobs.kubeflow.org, so
# a cluster serves one of them; localkube serves the v1 one.
MPIJOB_V2BETA1 = ResourceRef("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")


async def test_a_resource_served_in_another_version_says_which(hook: AsyncTrainingJobHook) -> None:
    with pytest.raises(KubeApiError) as caught:
        await hook.list_objects(MPIJOB_V2BETA1, "default")

    assert caught.value.resource_not_served and caught.value.served_in == ["v1"]
    assert str(caught.value).startswith("list mpijobs.kubeflow.org in namespace default: 404")
    assert str(caught.value).endswith(
        " (this cluster serves mpijobs.kubeflow.org in v1, not in v2beta1: the installed "
        "CustomResourceDefinition is another release's; use apiVersion kubeflow.org/v1 or install the one "
        "that serves v2beta1)"
    )


async def test_creating_a_job_of_a_version_not_served_says_which_is(hook: AsyncTrainingJobHook) -> None:
    kind = replace(get_kind("MPIJob"), resource=MPIJOB_V2BETA1)
    job = {"metadata": {"name": "pi"}, "spec": {"mpiReplicaSpecs": {}}}

    with pytest.raises(KubeApiError) as caught:
        await create_job(hook, kind, job, "default")

    assert caught.value.served_in == ["v1"] and "serves mpijobs.kubeflow.org in v1" in str(caught.value)
