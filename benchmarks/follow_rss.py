"""What one open log follow costs at the transport level: the RSS a process gains per open ``follow=true``
stream, over plain HTTP and over TLS, nothing else running in it.

    .venv/bin/python benchmarks/follow_rss.py                      # 500 streams each way
    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/follow_rss.py --streams 300   # an older tree

A server in a child process (asyncio; over TLS with localkube's self-signed kubelet certificate, not
verified by the client) answers each GET with a chunked 200 head and then nothing, as a quiet pod's log
follow does. The client opens one stream to warm up, then ``--streams`` more through one
``KubeTransport`` and reads VmRSS before and after (after a gc). A tree without ``KubeTransport.follow``
(before the provider's own stream) opens them with ``stream()``, an aiohttp response each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import subprocess
import sys
from pathlib import Path
from typing import Any

SERVER = r"""
import asyncio, sys
from localkube.kubeletapi import serving_context
async def main():
    context = serving_context("127.0.0.1", "follow-rss") if sys.argv[1] == "tls" else None
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.Event().wait()
    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def measure(scheme: str, streams: int) -> tuple[float, str]:
    from airflow_provider_training.hooks.kubeconfig import ClusterConfig
    from airflow_provider_training.hooks.transport import KubeTransport

    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, "tls" if scheme == "https" else "plain"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        # The server's certificate is self-signed and not verified: the handshake and the session are whole.
        transport = KubeTransport(ClusterConfig(host=f"{scheme}://127.0.0.1:{port}", verify_ssl=False))
        async with contextlib.AsyncExitStack() as stack:

            async def follow(n: int) -> Any:
                path = f"/api/v1/namespaces/ns/pods/p{n}/log"
                if hasattr(transport, "follow"):
                    opened = await transport.follow(path, query=[("follow", "true")])
                    stack.callback(opened.close)
                    return opened
                return await stack.enter_async_context(transport.stream(path, query=[("follow", "true")]))

            kept = [await follow(0)]
            gc.collect()
            before = rss_kb()
            for n in range(1, streams + 1):
                kept.append(await follow(n))
            gc.collect()
            grown = rss_kb() - before
        await transport.close()
        return grown / streams, type(kept[0]).__name__
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=500)
    args = parser.parse_args()
    for scheme in ("http", "https"):
        per_stream, kind = asyncio.run(measure(scheme, args.streams))
        print(f"{scheme:5}  {args.streams} open follows: {per_stream:6.1f} KB of RSS per stream ({kind})")


if __name__ == "__main__":
    main()
