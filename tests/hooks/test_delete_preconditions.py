"""Deletes that name the uid they mean (DeleteOptions ``preconditions``) against localkube over HTTP: the
real server's 409 Conflict when the name is another object now, and the hook leaving that object alone."""

from __future__ import annotations

import kubernetes_asyncio.client as k8s
import kubernetes_asyncio.config as k8s_config
import pytest

from airflow_provider_training.hooks.errors import KubeApiError
from airflow_provider_training.jobs import create_job, delete_job
from airflow_provider_training.kinds.registry import get_kind
from tests.hooks.kube_env import job_body, requests_to

PYTORCH = get_kind("PyTorchJob")


async def test_a_uid_precondition_of_another_object_is_a_conflict_and_nothing_is_deleted(kube, hook):
    old = await create_job(hook, PYTORCH, job_body("same-name"), "default")
    assert await delete_job(hook, PYTORCH, "same-name", "default") is True
    new = await create_job(hook, PYTORCH, job_body("same-name"), "default")
    old_uid, new_uid = old["metadata"]["uid"], new["metadata"]["uid"]

    with pytest.raises(KubeApiError) as caught:
        await hook.delete_object(PYTORCH.resource, "same-name", "default", uid=old_uid)

    body = caught.value.status_body
    assert caught.value.status == 409 and body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on pytorchjobs.kubeflow.org "same-name": Precondition failed: '
        f"UID in precondition: {old_uid}, UID in object meta: {new_uid}"
    )
    assert body["details"] == {"name": "same-name", "group": "kubeflow.org", "kind": "pytorchjobs"}
    assert (await hook.get_job(PYTORCH, "same-name", "default"))["metadata"]["uid"] == new_uid

    # delete_job: the other object and its children stay, and it says so with False
    assert await delete_job(hook, PYTORCH, "same-name", "default", uid=old_uid) is False
    assert (await hook.get_job(PYTORCH, "same-name", "default"))["metadata"]["uid"] == new_uid
    assert [r.status for r in requests_to(kube, "pytorchjobs", method="DELETE")] == [200, 409, 409]

    assert await delete_job(hook, PYTORCH, "same-name", "default", uid=new_uid) is True
    assert await hook.get_job(PYTORCH, "same-name", "default") is None
    assert await delete_job(hook, PYTORCH, "same-name", "default", uid=new_uid) is False  # gone: 404


async def test_the_kubernetes_client_sees_the_same_precondition_answers(kube):
    async with await k8s_config.new_client_from_config(config_file=str(kube.kubeconfig)) as api:
        core = k8s.CoreV1Api(api)
        created = await core.create_namespaced_config_map(
            "default", k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="cm"))
        )
        stale = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(resource_version="1"))
        with pytest.raises(k8s.ApiException) as caught:
            await core.delete_namespaced_config_map("cm", "default", body=stale)
        assert caught.value.status == 409
        assert (
            "Precondition failed: ResourceVersion in precondition: 1, ResourceVersion in object meta: "
            in (caught.value.body if isinstance(caught.value.body, str) else caught.value.body.decode())
        )
        exact = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=created.metadata.uid))
        await core.delete_namespaced_config_map("cm", "default", body=exact)
        assert (await core.list_namespaced_config_map("default")).items == []
