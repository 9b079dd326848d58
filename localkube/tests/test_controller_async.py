"""The controller and the scripted runtime sharing one event loop with `kubernetes_asyncio`, as in a
triggerer: a job is created, watched to its end and its replica log read, all without blocking the loop."""

from __future__ import annotations

from kubernetes_asyncio import client, config, watch
from localkube.cluster import LocalKube
from test_controller_support import GROUP, VERSION, conditions, is_true, job, replica


async def test_a_jaxjob_watched_with_the_async_client(localkube_async: LocalKube) -> None:
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(localkube_async.kubeconfig), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api:
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        body = job(
            "JAXJob", "jax", {"Worker": replica("jax", 2)}, script={"Worker": {"logs": ["id {index}"]}}
        )
        await custom.create_namespaced_custom_object(GROUP, VERSION, "default", "jaxjobs", body)
        states = []
        async with watch.Watch() as stream:
            async for event in stream.stream(
                custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                "default",
                "jaxjobs",
                field_selector="metadata.name=jax",
                timeout_seconds=15,
            ):
                states.append(event["object"])
                if is_true(event["object"], "Succeeded"):
                    break
        assert conditions(states[-1]) == [
            ("Created", "True", "JAXJobCreated"),
            ("Running", "False", "JAXJobRunning"),
            ("Succeeded", "True", "JAXJobSucceeded"),
        ]
        assert states[-1]["status"]["replicaStatuses"]["Worker"]["succeeded"] == 2
        log = await core.read_namespaced_pod_log("jax-worker-1", "default")
        assert log == "id 1\n"
        pod = await core.read_namespaced_pod("jax-worker-0", "default")
        assert pod.metadata.labels["training.kubeflow.org/job-role"] == "master"  # JAX: index 0
