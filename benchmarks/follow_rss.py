"""What one open log follow costs: the RSS a process gains per open ``follow=true`` stream, over plain HTTP,
over TLS with HTTP/1.1 (a connection per follow) and over TLS with HTTP/2 (the follows share connections),
nothing else running in it; and per followed pod of ``ReplicaLogStreamer`` (``--streamer``).

    .venv/bin/python benchmarks/follow_rss.py                      # 500 streams each way
    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/follow_rss.py --streams 300   # an older tree
    .venv/bin/python benchmarks/follow_rss.py --streamer           # 300 streamers of 2 pods each
    .venv/bin/python benchmarks/follow_rss.py --streamer --lines 5 --trace   # pods that said 5 lines; by site

A server in a child process (asyncio; over TLS with localkube's self-signed kubelet certificate, not
verified by the client; for ``h2`` an HTTP/2 server on the ``h2`` library that allows 1,000 streams per
connection) answers each GET with a 200 head and then nothing, as a quiet pod's log follow does
(``--lines K``: K timestamped lines in the first chunk, then nothing). The client opens one stream to warm
up, then ``--streams`` more through one ``KubeTransport`` and reads VmRSS and tracemalloc's traced size
before and after (after a gc). RSS alone can hide a small cost in memory the warm-up left free. A
tree without ``KubeTransport.follow`` (before the provider's own stream) opens them with ``stream()``, an
aiohttp response each.

``--streamer``: ``--jobs`` streamers (``log_replicas="all"``, each with its own hook, as each trigger has),
each following the two running pods (Master, Worker) of its job. The pods come from a stand-in for the
watch hub, as the hub hands them: trimmed and unpacked dicts of a localkube-like pod. Measured: VmRSS per
followed pod (before: the hooks made; after: every pod's stream open and, with ``--lines``, its lines
emitted), and with ``--trace`` tracemalloc's allocations still live, per followed pod by site, and a census
of live objects per pod. The streamers' own part (the run task, its subscription) is in the figures; the
trigger and its waiter are not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

SERVER = r"""
import asyncio, sys
from localkube.kubeletapi import serving_context
LINES = int(sys.argv[2])
async def main():
    context = serving_context("127.0.0.1", "follow-rss") if sys.argv[1] == "tls" else None
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        if LINES:
            body = b"".join(
                b"2026-12-03T10:00:%02d.%09dZ step %d loss %.4f\n" % (n % 60, n, n, 1 / (n + 1))
                for n in range(LINES)
            )
            writer.write(b"%x\r\n%s\r\n" % (len(body), body))
        await writer.drain()
        await asyncio.Event().wait()
    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""

SERVER_H2 = r"""
import asyncio, sys
import h2.config, h2.connection, h2.events, h2.settings
from localkube.kubeletapi import serving_context
async def main():
    context = serving_context("127.0.0.1", "follow-rss")
    context.set_alpn_protocols(["h2"])
    async def handle(reader, writer):
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.local_settings = h2.settings.Settings(
            client=False, initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000}
        )
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        while data := await reader.read(65536):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    conn.send_headers(event.stream_id, [(":status", "200"), ("content-type", "text/plain")])
            writer.write(conn.data_to_send())
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


@contextlib.contextmanager
def silent_server(scheme: str, lines: int = 0) -> Any:
    code, mode = (SERVER_H2, "h2") if scheme == "h2" else (SERVER, "tls" if scheme == "https" else "plain")
    server = subprocess.Popen(
        [sys.executable, "-c", code, mode, str(lines)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline())
    finally:
        server.kill()
        server.wait()


async def measure(scheme: str, streams: int) -> tuple[float, float, str, str]:
    """RSS and tracemalloc's live allocations per open follow, the follows' type, their connections."""
    import tracemalloc

    from airflow_provider_training.hooks.kubeconfig import ClusterConfig
    from airflow_provider_training.hooks.transport import KubeTransport

    with silent_server(scheme) as port:
        # The server's certificate is self-signed and not verified: the handshake and the session are whole.
        url = f"{'https' if scheme == 'h2' else scheme}://127.0.0.1:{port}"
        transport = KubeTransport(ClusterConfig(host=url, verify_ssl=False))
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
            tracemalloc.start()
            traced_before = tracemalloc.get_traced_memory()[0]
            before = rss_kb()
            for n in range(1, streams + 1):
                kept.append(await follow(n))
            gc.collect()
            grown = rss_kb() - before
            traced = tracemalloc.get_traced_memory()[0] - traced_before
            tracemalloc.stop()
            links = getattr(getattr(transport, "_pool", None), "h2", None)
            count = len(links.links) if links else 0
            connections = f"{count} connection{'s' if count > 1 else ''}" if count else "a connection each"
        await transport.close()
        return grown / streams, traced / streams / 1024, type(kept[0]).__name__, connections


# -- a followed pod of ReplicaLogStreamer --------------------------------------------------------------------


def replica_pod(job: str, replica: str, n: int) -> dict[str, Any]:
    """A running PyTorchJob replica pod as localkube writes it (the hub trims it before keeping it)."""
    name = f"{job}-{replica.lower()}-0"
    stamp = "2026-12-03T10:00:00Z"
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": replica.lower(),
        "training.kubeflow.org/replica-index": "0",
    }
    if replica == "Master":
        labels["training.kubeflow.org/job-role"] = "master"
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
        for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"0000{n:04d}-1111-2222-3333-{replica.lower():0>12}"[:36],
            "resourceVersion": str(1000 + n),
            "creationTimestamp": stamp,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": job,
                    "uid": f"job-{n:08d}-aaaa-bbbb-cccc-dddddddddddd",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [{"name": "pytorch", "image": "busybox:1", "command": ["sh", "-c", "train"]}],
            "restartPolicy": "Never",
            "nodeName": "localkube",
        },
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "startTime": stamp,
            "podIP": "10.0.0.1",
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "state": {"running": {"startedAt": stamp}},
                    "lastState": {},
                    "restartCount": 0,
                    "ready": True,
                    "started": True,
                    "image": "busybox:1",
                }
            ],
        },
    }


class HubStandIn:
    """What ``ReplicaLogStreamer`` asks of the watch hub: ``feed()`` hands it its job's pods as the hub hands
    a subscriber each object (a dict unpacked from the hub's packed record), then nothing."""

    def __init__(self, pods: dict[str, list[Any]]) -> None:
        self.pods = pods  # job name -> the hub's records of its pods

    def cached(self, *args: Any) -> None:
        return None

    @contextlib.asynccontextmanager
    async def feed(
        self, hook: Any, resource: Any, namespace: str, deliver: Callable[[Any], None], **selection: Any
    ) -> AsyncIterator[None]:
        from airflow_provider_training.watch import WatchEvent

        job = selection["label_selector"][0].split("job-name=")[1].split(",")[0]
        for packed in self.pods[job]:
            asyncio.get_running_loop().call_soon(deliver, WatchEvent("ADDED", packed.unpack(), packed))
        yield


async def measure_streamer(args: argparse.Namespace) -> list[str]:
    from airflow_provider_training.hooks.training import AsyncTrainingJobHook
    from airflow_provider_training.kinds.base import PODS
    from airflow_provider_training.kinds.registry import get_kind
    from airflow_provider_training.logs import ReplicaLogStreamer
    from airflow_provider_training.slim import Packed, trim

    kind = get_kind("PyTorchJob")
    jobs = [f"job-{n:05d}" for n in range(args.jobs + 1)]  # the first warms up
    pods = {
        job: [Packed(trim(replica_pod(job, r, n), PODS)) for r in ("Master", "Worker")]
        for n, job in enumerate(jobs)
    }
    hub = HubStandIn(pods)
    emitted = [0]

    def emit(line: str, **_: Any) -> None:
        emitted[0] += 1

    with silent_server("http", args.lines) as port:
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "default"}}],
            "current-context": "x",
        }
        hooks = [AsyncTrainingJobHook(None, connection_extras={"kube_config": kubeconfig}) for _ in jobs]
        for hook in hooks:
            await hook.get_settings()
        streamers = [
            ReplicaLogStreamer(
                hook,
                kind,
                "default",
                job,
                replicas="all",
                emit=emit,
                hub=hub,
                tail_lines=20,  # type: ignore[arg-type]
                pod_times=True,
            )
            for hook, job in zip(hooks, jobs, strict=True)
        ]
        followed = 2 * args.jobs
        want_lines = 2 * args.lines

        async def until(condition: Callable[[], bool]) -> None:
            for _ in range(1200):
                if condition():
                    return
                await asyncio.sleep(0.1)
            raise RuntimeError("the follows did not open")

        def opened() -> int:
            """Follows whose answer's head was read (not only sent: the request count says that)."""
            return sum(
                1
                for o in gc.get_objects()
                if type(o).__name__ == "LineStream" and getattr(o, "status", 0) == 200
            )

        tasks = [asyncio.get_running_loop().create_task(streamers[0].run())]
        await until(lambda: opened() == 2 and emitted[0] >= want_lines)
        await asyncio.sleep(0.2)
        gc.collect()
        tracemalloc = None
        if args.trace:
            import tracemalloc

            tracemalloc.start(12)
            snap_before = tracemalloc.take_snapshot()
        census_before = Counter(type(o).__qualname__ for o in gc.get_objects())
        before = rss_kb()
        tasks += [asyncio.get_running_loop().create_task(s.run()) for s in streamers[1:]]
        await until(lambda: opened() == 2 + followed and emitted[0] >= want_lines * (args.jobs + 1))
        await asyncio.sleep(0.5)  # the last heads parsed, the reads settled
        gc.collect()
        grown = rss_kb() - before
        out = [
            f"streamer  {args.jobs} jobs x 2 followed pods, {args.lines} lines each: "
            f"{grown / followed:5.2f} KB of RSS per followed pod ({emitted[0]} lines emitted)"
        ]
        if tracemalloc is not None:
            snap = tracemalloc.take_snapshot()
            tracemalloc.stop()
            out += trace_lines(snap, snap_before, followed)
        census = Counter(type(o).__qualname__ for o in gc.get_objects())
        grown_types = [(census[k] - census_before[k], k) for k in census]
        out.append("live objects per followed pod (gc census, the most grown types):")
        for count, name in sorted(grown_types, reverse=True)[:16]:
            if count > 0:
                out.append(f"  {count / followed:6.2f}  {name}")
        for task in tasks:  # cancelled, not stop()-ped: no final read of a server that answers nothing
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for hook in hooks:
            await hook.close()
    return out


def trace_lines(snap: Any, snap_before: Any, followed: int) -> list[str]:
    """The allocations still live per followed pod, by the innermost frame (and the first of ours)."""
    import tracemalloc

    diff = snap.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)]).compare_to(
        snap_before, "traceback"
    )
    sites: Counter[str] = Counter()
    total = 0
    for stat in diff:
        if stat.size_diff <= 0:
            continue
        total += stat.size_diff
        frames = list(stat.traceback)  # the oldest first
        inner = frames[-1] if frames else None
        ours = next((f for f in reversed(frames) if "airflow_provider_training" in f.filename), None)
        label = f"{_short(inner.filename)}:{inner.lineno}" if inner else "?"
        if ours is not None and ours is not inner:
            label += f" <- {_short(ours.filename)}:{ours.lineno}"
        sites[label] += stat.size_diff
    out = [f"tracemalloc: {total / followed / 1024:.2f} KiB still live per followed pod; the sites:"]
    for label, size in sites.most_common(30):
        out.append(f"  {size / followed:7.0f} B  {label}")
    return out


def _short(filename: str) -> str:
    for mark in ("airflow_provider_training/", "asyncio/", "site-packages/"):
        if mark in filename:
            rest = filename.split(mark, 1)[1]
            return rest if mark == "site-packages/" else mark + rest
    return filename.rsplit("/", 1)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--streamer", action="store_true", help="followed pods of ReplicaLogStreamer")
    parser.add_argument("--jobs", type=int, default=300, help="--streamer: streamers (2 pods each)")
    parser.add_argument("--lines", type=int, default=0, help="--streamer: lines each pod said first")
    parser.add_argument("--trace", action="store_true", help="--streamer: tracemalloc by site")
    parser.add_argument(
        "--schemes",
        default="http,https,h2",
        help="of http, https (HTTP/1.1 over TLS), h2 (a tree before h2: no h2)",
    )
    args = parser.parse_args()
    if args.streamer:
        print("\n".join(asyncio.run(measure_streamer(args))))
        return
    for scheme in args.schemes.split(","):
        rss, traced, kind, connections = asyncio.run(measure(scheme, args.streams))
        print(
            f"{scheme:5}  {args.streams} open follows: {rss:6.1f} KB of RSS and {traced:5.2f} KiB traced "
            f"per stream ({kind}, {connections})"
        )


if __name__ == "__main__":
    main()
