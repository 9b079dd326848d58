"""Reading streamed bodies (lines and UTF-8 characters split across chunks, a last line without newline), and
the sessions transports share per configuration and event loop, against localkube."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from airflow_provider_training.hooks.kubeconfig import ClusterConfig
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.hooks.transport import collection_path, encode_query, iter_lines, object_path
from airflow_provider_training.kinds.base import PODS, ResourceRef
from airflow_provider_training.kinds.registry import get_kind
from tests.hooks.kube_env import FAST_RETRY, requests_to, until

JOB = get_kind("PyTorchJob").resource

CHUNKS = [b"hel", b"lo\nwo", b"rld \xe2\x9c", b"\x93\n\n", b"last without newline"]


async def _chunked(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    for chunk in CHUNKS:
        await response.write(chunk)
        await asyncio.sleep(0.01)  # let each chunk reach the client on its own
    await response.write_eof()
    return response


async def test_lines_are_joined_across_chunks():
    app = web.Application()
    app.router.add_get("/log", _chunked)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/log") as resp:
            lines = [line.decode("utf-8", errors="replace") async for line in iter_lines(resp)]
    finally:
        await runner.cleanup()
    assert lines == ["hello", "world ✓", "", "last without newline"]


def test_paths_for_core_and_group_resources():
    job = ResourceRef("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
    assert collection_path(job, "ns") == "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs"
    assert object_path(PODS, "ns", "p", "log") == "/api/v1/namespaces/ns/pods/p/log"
    assert collection_path(PODS, None) == "/api/v1/pods"


def test_query_encoding():
    assert encode_query({"watch": True, "previous": False, "tailLines": 5, "sinceTime": None}) == [
        ("watch", "true"),
        ("previous", "false"),
        ("tailLines", "5"),
    ]


async def _watch_forever(hook: AsyncTrainingJobHook) -> None:
    async for _event in hook.watch_objects(JOB, "default", timeout_seconds=600):
        pass


async def test_hooks_on_one_connection_share_the_loops_sessions_until_the_last_closes(kube, kube_conn):
    hooks = [AsyncTrainingJobHook(kube_conn, retry=FAST_RETRY) for _ in range(3)]
    for hook in hooks:
        assert await hook.get_object(JOB, "absent", "default") is None
    pools = {id((await hook.transport())._pool) for hook in hooks}
    pool = (await hooks[0].transport())._pool
    assert len(pools) == 1 and pool is not None and pool.users == 3
    session = pool.session
    assert session is not None
    for hook in hooks[:2]:
        await hook.close()
    assert not session.closed
    await hooks[2].close()
    assert session.closed and pool.session is None
    # A hook used afterwards opens fresh sessions.
    again = AsyncTrainingJobHook(kube_conn, retry=FAST_RETRY)
    assert await again.get_object(JOB, "absent", "default") is None
    fresh = (await again.transport())._pool
    assert fresh is not None and fresh is not pool and fresh.session is not None and not fresh.session.closed
    await again.close()


async def test_each_event_loop_has_its_own_sessions(kube, kube_conn):
    hook = AsyncTrainingJobHook(kube_conn, retry=FAST_RETRY)
    await hook.get_object(JOB, "absent", "default")
    here = (await hook.transport())._pool

    def elsewhere() -> tuple[object, bool]:
        async def use() -> tuple[object, bool]:
            other = AsyncTrainingJobHook(kube_conn, retry=FAST_RETRY)
            await other.get_object(JOB, "absent", "default")
            pool = (await other.transport())._pool
            assert pool is not None
            session = pool.session
            assert session is not None
            await other.close()
            return pool, session.closed

        return asyncio.run(use())

    pool, closed = await asyncio.to_thread(elsewhere)
    assert pool is not here and closed  # closed with its loop's last hook, before that loop ended
    await hook.close()


async def test_connections_are_not_capped_by_the_pool_size_and_plain_http_builds_no_tls_context(
    kube, kube_conn, monkeypatch
):
    built: list[object] = []
    monkeypatch.setattr(ClusterConfig, "ssl_context", lambda cfg: built.append(cfg) or None)
    hook = AsyncTrainingJobHook(kube_conn, retry=FAST_RETRY)
    watches = [asyncio.create_task(_watch_forever(hook)) for _ in range(3)]
    try:
        # Three open watches at once and a short request besides: no pool size caps them.
        await until(lambda: len([r for r in requests_to(kube, "pytorchjobs", watch=True) if r.status]) == 3)
        assert await hook.get_object(JOB, "absent", "default") is None  # short requests still get through
    finally:
        for task in watches:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
        await hook.close()
    assert built == []  # localkube is http://: no TLS context
