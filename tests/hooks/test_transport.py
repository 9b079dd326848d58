"""Reading streamed bodies: lines and UTF-8 characters split across chunks, a last line without newline."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from airflow_provider_training.hooks.transport import collection_path, encode_query, iter_lines, object_path
from airflow_provider_training.kinds.base import PODS, ResourceRef

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
