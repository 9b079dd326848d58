"""Connection resolution: the cncf.kubernetes ``kubernetes`` connection extras, precedence and exclusivity."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk.exceptions import AirflowNotFoundException
from localkube.cluster import LocalKube

from airflow_provider_training.hooks.connection import (
    ConnectionConfigError,
    KubeSettings,
    build_configuration,
    load_connection_extras,
    load_connection_extras_sync,
)
from airflow_provider_training.hooks.training import AsyncTrainingJobHook, TrainingJobHook
from airflow_provider_training.kinds.base import PODS
from tests.hooks.kube_env import FAST_RETRY, local_cluster, rtype

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
    "users": [{"name": "u", "user": {"token": "t0ken"}}],
    "contexts": [
        {"name": "one", "context": {"cluster": "c", "user": "u"}},
        {"name": "two", "context": {"cluster": "c", "user": "u", "namespace": "ns2"}},
    ],
    "current-context": "one",
}


def test_extras_are_read_plain_and_with_the_legacy_prefix():
    plain = KubeSettings.from_extras(
        {"namespace": "ns", "cluster_context": "ctx", "disable_verify_ssl": "true"}
    )
    legacy = KubeSettings.from_extras(
        {
            "extra__kubernetes__namespace": "ns",
            "extra__kubernetes__cluster_context": "ctx",
            "extra__kubernetes__disable_verify_ssl": True,
        }
    )
    assert plain == legacy == KubeSettings(namespace="ns", cluster_context="ctx", disable_verify_ssl=True)


def test_explicit_arguments_win_over_extras():
    settings = KubeSettings.from_extras(
        {"kube_config_path": "/from/conn", "namespace": "conn-ns", "cluster_context": "conn-ctx"},
        config_file="/explicit",
        namespace="explicit-ns",
        cluster_context="explicit-ctx",
    )
    assert (settings.kube_config_path, settings.namespace, settings.cluster_context) == (
        "/explicit",
        "explicit-ns",
        "explicit-ctx",
    )


@pytest.mark.parametrize("text", [json.dumps(KUBECONFIG), "apiVersion: v1\nkind: Config\nclusters: []\n"])
def test_kube_config_string_is_json_or_yaml(text):
    settings = KubeSettings.from_extras({"kube_config": text})
    assert settings.kube_config is not None and settings.kube_config["kind"] == "Config"


def test_kube_config_that_is_not_a_mapping_is_refused():
    with pytest.raises(ConnectionConfigError, match="kubeconfig mapping"):
        KubeSettings.from_extras({"kube_config": "just a string"})


@pytest.mark.parametrize(
    ("extras", "config_file", "named"),
    [
        ({"in_cluster": True, "kube_config_path": "/a"}, None, "in_cluster and kube_config_path"),
        ({"kube_config": KUBECONFIG}, "/explicit", "kube_config_path and kube_config"),
        ({"extra__kubernetes__in_cluster": "1", "kube_config": KUBECONFIG}, None, "in_cluster and kube_con"),
    ],
)
def test_config_sources_are_mutually_exclusive(extras, config_file, named):
    with pytest.raises(ConnectionConfigError, match=named):
        KubeSettings.from_extras(extras, config_file=config_file)


def test_false_strings_do_not_select_in_cluster():
    assert KubeSettings.from_extras({"in_cluster": "false", "kube_config_path": "/a"}).in_cluster is False


async def test_inline_kube_config_and_context_build_the_client_configuration():
    cfg = await build_configuration(KubeSettings(kube_config=KUBECONFIG, cluster_context="two"))
    assert cfg.host == "http://127.0.0.1:1"
    assert await cfg.auth_headers() == {"Authorization": "Bearer t0ken"}


async def test_disable_verify_ssl_reaches_the_client_configuration(tmp_path):
    path = tmp_path / "config"
    path.write_text(json.dumps(KUBECONFIG))
    cfg = await build_configuration(KubeSettings(kube_config_path=str(path), disable_verify_ssl=True))
    assert cfg.verify_ssl is False


async def test_default_credentials_use_kubeconfig_env(tmp_path, monkeypatch):
    path = tmp_path / "config"
    path.write_text(json.dumps(KUBECONFIG))
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cfg = await build_configuration(KubeSettings())
    assert cfg.host == "http://127.0.0.1:1"


async def test_missing_default_connection_means_default_credentials(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", raising=False)
    assert await load_connection_extras("kubernetes_default") == {}
    assert load_connection_extras_sync("kubernetes_default") == {}


async def test_missing_named_connection_is_an_error():
    with pytest.raises(AirflowNotFoundException):
        await load_connection_extras("no_such_connection")
    with pytest.raises(AirflowNotFoundException):
        load_connection_extras_sync("no_such_connection")


async def test_a_missing_named_connection_fails_the_hooks_naming_it_and_falls_back_to_nothing(
    kube, monkeypatch
):
    """``KUBECONFIG`` names a cluster; a hook on a connection that does not exist must not reach it."""
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    hook = AsyncTrainingJobHook("no_such_connection", retry=FAST_RETRY)
    try:
        with pytest.raises(AirflowNotFoundException, match="no_such_connection"):
            await hook.list_pods("default", "")
    finally:
        await hook.close()
    with (
        TrainingJobHook("no_such_connection", retry=FAST_RETRY) as sync_hook,
        pytest.raises(AirflowNotFoundException, match="no_such_connection"),
    ):
        sync_hook.get_namespace()
    assert kube.requests == []


async def test_a_missing_default_connection_is_said_in_the_log(kube, monkeypatch, caplog):
    """No ``kubernetes_default``: the default credentials, as KubernetesHook, but not silently."""
    monkeypatch.delenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    hook = AsyncTrainingJobHook(retry=FAST_RETRY)
    try:
        assert await hook.list_pods("default", "") == []
    finally:
        await hook.close()
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert said == [
        "The connection kubernetes_default is not defined: using the default credentials (the pod's service "
        "account in a pod, else KUBECONFIG or ~/.kube/config)"
    ]
    assert len(pod_reads(kube)) == 1


async def test_env_connection_extras_resolve_async_and_sync(monkeypatch):
    extra = {"namespace": "ns1", "kube_config": KUBECONFIG}
    monkeypatch.setenv("AIRFLOW_CONN_KTEST", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    assert await load_connection_extras("ktest") == extra
    assert load_connection_extras_sync("ktest") == extra


async def test_concurrent_lookups_of_one_connection_share_one_and_survive_a_cancelled_caller(monkeypatch):
    """Triggers starting together share one lookup; a caller cancelled meanwhile leaves it running for the
    others (an abandoned request to the triggerer's supervisor would answer the next one)."""
    import asyncio

    from airflow_provider_training.hooks import connection

    started, release = [], asyncio.Event()

    async def lookup(conn_id: str) -> dict:
        started.append(conn_id)
        await release.wait()
        return {"namespace": "ns1"}

    monkeypatch.setattr(connection, "_lookup_extras", lookup)
    first = asyncio.ensure_future(load_connection_extras("ktest"))
    others = [asyncio.ensure_future(load_connection_extras("ktest")) for _ in range(20)]
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    release.set()

    assert [await other for other in others] == [{"namespace": "ns1"}] * 20
    assert started == ["ktest"]
    assert first.cancelled()
    assert await load_connection_extras("ktest") == {"namespace": "ns1"}  # done: a new lookup
    assert started == ["ktest", "ktest"]


# -- cluster_context: which of a kubeconfig's clusters requests reach ---------------------------------------


def two_context_kubeconfig(alpha: LocalKube, beta: LocalKube) -> dict[str, Any]:
    """A kubeconfig whose contexts ``alpha`` (the current one) and ``beta`` name two different localkubes,
    each with its own token (so a request reaching one with the other's credentials would be refused)."""
    clusters = {"alpha": alpha, "beta": beta}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": kube.url}} for name, kube in clusters.items()],
        "users": [{"name": name, "user": {"token": kube.token}} for name, kube in clusters.items()],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}} for name in clusters],
        "current-context": "alpha",
    }


def use_extras(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict[str, Any]) -> str:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra})
    )
    return conn_id


def mark_with_a_pod(kube: LocalKube, name: str) -> None:
    """A pod only this cluster has, so that reading it back proves which cluster answered."""
    pod = {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    kube.store.create(rtype(kube, PODS), "default", pod)


def pod_reads(kube: LocalKube) -> list[str]:
    return [record.path for record in kube.requests if "/pods" in record.path]


@contextlib.asynccontextmanager
async def two_clusters(tmp_path: Path) -> AsyncIterator[tuple[LocalKube, LocalKube, Path]]:
    async with local_cluster(tmp_path / "alpha") as alpha, local_cluster(tmp_path / "beta") as beta:
        mark_with_a_pod(alpha, "on-alpha")
        mark_with_a_pod(beta, "on-beta")
        path = tmp_path / "two-contexts"
        path.write_text(yaml.safe_dump(two_context_kubeconfig(alpha, beta)))
        yield alpha, beta, path


async def names_of_pods(hook: AsyncTrainingJobHook) -> list[str]:
    try:
        return [pod["metadata"]["name"] for pod in await hook.list_pods("default", "")]
    finally:
        await hook.close()


@pytest.mark.parametrize(
    ("config_extra", "context_extra"),
    [
        ("kube_config_path", "cluster_context"),
        ("kube_config", "cluster_context"),
        ("kube_config_path", "extra__kubernetes__cluster_context"),
    ],
)
async def test_cluster_context_extra_chooses_the_cluster_requests_reach(
    tmp_path, monkeypatch, config_extra, context_extra
):
    async with two_clusters(tmp_path) as (alpha, beta, path):
        extra = {config_extra: str(path) if config_extra == "kube_config_path" else path.read_text()}
        chosen = use_extras(monkeypatch, "two_beta", {**extra, context_extra: "beta"})
        current = use_extras(monkeypatch, "two_current", extra)

        assert await names_of_pods(AsyncTrainingJobHook(chosen, retry=FAST_RETRY)) == ["on-beta"]
        assert (len(pod_reads(alpha)), len(pod_reads(beta))) == (0, 1)
        # The same kubeconfig without the extra: its current context, in the same process (the configuration
        # shared per cluster settings is not the other context's).
        assert await names_of_pods(AsyncTrainingJobHook(current, retry=FAST_RETRY)) == ["on-alpha"]
        assert (len(pod_reads(alpha)), len(pod_reads(beta))) == (1, 1)


async def test_hook_cluster_context_argument_wins_over_the_extra(tmp_path, monkeypatch):
    async with two_clusters(tmp_path) as (alpha, beta, path):
        conn = use_extras(monkeypatch, "two_beta", {"kube_config_path": str(path), "cluster_context": "beta"})

        hook = AsyncTrainingJobHook(conn, cluster_context="alpha", retry=FAST_RETRY)
        assert await names_of_pods(hook) == ["on-alpha"]
        assert (len(pod_reads(alpha)), len(pod_reads(beta))) == (1, 0)


async def test_unknown_cluster_context_is_refused_naming_it(tmp_path, monkeypatch):
    async with two_clusters(tmp_path) as (alpha, beta, path):
        conn = use_extras(
            monkeypatch, "two_gamma", {"kube_config_path": str(path), "cluster_context": "gamma"}
        )

        with pytest.raises(
            ConnectionConfigError, match=r"no context named 'gamma' \(it has \['alpha', 'beta'\]\)"
        ):
            await names_of_pods(AsyncTrainingJobHook(conn, retry=FAST_RETRY))
        assert alpha.requests == beta.requests == []


async def test_the_contexts_namespace_is_not_read(monkeypatch):
    """As KubernetesHook: a job's namespace comes from the connection's extra, not the chosen context."""
    conn = use_extras(monkeypatch, "ctx_ns", {"kube_config": KUBECONFIG, "cluster_context": "two"})
    assert await AsyncTrainingJobHook(conn).get_namespace() == "default"


@pytest.fixture
def two_thread_clusters(tmp_path: Path) -> Iterator[tuple[LocalKube, LocalKube, Path]]:
    with LocalKube(runtime=None, controllers=[]) as alpha, LocalKube(runtime=None, controllers=[]) as beta:
        for kube, name in ((alpha, "on-alpha"), (beta, "on-beta")):
            kube.call(mark_with_a_pod, kube, name)
        path = tmp_path / "two-contexts"
        path.write_text(yaml.safe_dump(two_context_kubeconfig(alpha, beta)))
        yield alpha, beta, path


def test_sync_hook_passes_cluster_context_on(two_thread_clusters, monkeypatch):
    alpha, beta, path = two_thread_clusters
    conn = use_extras(monkeypatch, "two_current", {"kube_config_path": str(path)})

    with TrainingJobHook(conn, cluster_context="beta", retry=FAST_RETRY) as hook:
        assert [pod["metadata"]["name"] for pod in hook.list_pods("default", "")] == ["on-beta"]
    assert (len(pod_reads(alpha)), len(pod_reads(beta))) == (0, 1)
