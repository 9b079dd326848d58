"""LocalKube: the store, the HTTP server, the controllers and a pod runtime, on one event loop."""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from localkube.api import supervise
from localkube.faults import Faults
from localkube.kubeconfig import write_kubeconfig
from localkube.podlogs import PodLogs
from localkube.resources import NAMESPACES, ResourceType
from localkube.server import RequestRecord, build_app
from localkube.store import ApiError, Store


class LocalKube:
    """A local Kubernetes API server. `await start()` in a running loop, or `start_in_thread()`.

    `controllers`: None starts `localkube.controllers.default_controllers()`; pass `[]` for none.
    `runtime`: "scripted" | "process"; None or "none" starts no pod runtime.
    `crd_dir`: a directory of CRD YAMLs (searched recursively), or several.
    `namespaces`: created besides the ones every cluster has (default, kube-system, kube-public,
    kube-node-lease); like a real server, localkube answers 404 for an object in any other namespace.
    `clock_offset`: seconds the server's clock is ahead of this machine's (negative: behind), as clients see
    it in `metadata.creationTimestamp`, the `Date` header (`Store.clock_offset`) and the timestamps of log
    lines.
    """

    def __init__(
        self,
        *,
        runtime: str | None = "scripted",
        crd_dir: str | Path | Sequence[str | Path] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        controllers: list | None = None,
        history_size: int = 1000,
        bookmark_interval: float = 5.0,
        namespaces: tuple[str, ...] | list[str] = (),
        clock_offset: float = 0.0,
    ) -> None:
        self.runtime = runtime
        self.host, self.port = host, port
        self.token = token or secrets.token_urlsafe(24)
        self.store = Store(history_size=history_size)
        self.store.clock_offset = clock_offset  # see Store.clock_offset
        self.logs = PodLogs(lambda: time.time_ns() + round(self.store.clock_offset * 1e9))
        self.faults = Faults()
        self.faults.restart_hook = self._restart_anywhere
        self.requests: list[RequestRecord] = []
        # Called with (plural, event type, object) right after a watch event was written to a client:
        # benchmarks time the server's share of a status change's way to a trigger with it.
        self.watch_observer: Callable[[str, str, dict], None] | None = None
        self.bookmark_interval = bookmark_interval
        self.task_errors: list[BaseException] = []  # what a controller or runtime task died of
        self.url = ""
        self.kubeconfig: Path | None = None  # the last kubeconfig written
        self.loop: asyncio.AbstractEventLoop | None = None
        self.schema: Any = None
        self._controllers = controllers
        self._tasks: list[asyncio.Task] = []
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        if crd_dir is not None:
            self._load_crds(crd_dir)
        self.create_namespaces(*namespaces)

    def create_namespaces(self, *names: str) -> None:
        """Create these namespaces (those that exist already are left as they are); thread-safe."""
        for name in names:
            try:
                self.store.create(NAMESPACES, "", {"metadata": {"name": name}})
            except ApiError as exc:
                if exc.code != 409:
                    raise

    # -- schema --------------------------------------------------------------------------------------------
    def _load_crds(self, crd_dir: str | Path | Sequence[str | Path]) -> None:
        from localkube.schema import SchemaRegistry

        dirs = [crd_dir] if isinstance(crd_dir, (str, Path)) else list(crd_dir)
        self.schema = SchemaRegistry.from_dirs(dirs)
        for crd in self.schema.crds():
            self.store.register(
                ResourceType(
                    crd.group,
                    crd.version,
                    crd.plural,
                    crd.kind,
                    crd.singular,
                    crd.namespaced,
                    frozenset(crd.subresources) & {"status"},
                )
            )
        self.store.validator = self._validate

    def _validate(self, rt: ResourceType, obj: dict) -> dict:
        from localkube.schema import SchemaViolation

        if not self.schema.has(rt.group, rt.version, rt.plural):
            return obj
        try:
            return self.schema.validate_and_prune(rt.group, rt.version, rt.plural, obj)
        except SchemaViolation as exc:
            name = (obj.get("metadata") or {}).get("name", "")
            raise ApiError(
                422,
                "Invalid",
                str(exc),
                {"name": name, "group": rt.group, "kind": rt.kind, "causes": exc.causes()},
            ) from exc

    # -- lifecycle in the current loop ---------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self._listen()
        workers = list(self._default_controllers() if self._controllers is None else self._controllers)
        if self.runtime not in (None, "none"):
            from localkube.runtime import make_runtime

            workers.append(make_runtime(self.runtime))
        self._tasks = [asyncio.create_task(supervise(worker, self, self.task_errors)) for worker in workers]

    @staticmethod
    def _default_controllers() -> list:
        from localkube.controllers import default_controllers

        return list(default_controllers())

    async def _listen(self) -> None:
        self._runner = web.AppRunner(
            build_app(self), handler_cancellation=True, access_log=None, shutdown_timeout=0.1
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self.url = f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self.faults.restart_hook = None
        self.faults.open_gates()
        self.faults.end_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def restart(self) -> None:
        """Drop every connection and listen again on the same port; the state and the tasks stay."""
        if self._runner is not None:
            await self._runner.cleanup()  # open streams are cut, not ended: clients see a broken connection
        await self._listen()

    def _restart_anywhere(self) -> Any:
        if self.loop is None:
            raise RuntimeError("the cluster is not running")
        if self._in_loop_thread():
            return self.loop.create_task(self.restart())
        return asyncio.run_coroutine_threadsafe(self.restart(), self.loop).result(30)

    async def __aenter__(self) -> LocalKube:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- lifecycle in a thread of its own ------------------------------------------------------------------
    def start_in_thread(self) -> LocalKube:
        """Run the cluster on its own loop in a daemon thread; returns once it listens."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=main, name="localkube", daemon=True)
        self._thread.start()
        if not ready.wait(60):
            raise RuntimeError("localkube did not start within 60 s")
        if failure:
            raise failure[0]
        return self

    def stop_thread(self) -> None:
        if self._thread is None or self.loop is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        thread, self._thread = self._thread, None
        thread.join(30)
        if thread.is_alive():  # never leave a server thread behind unnoticed
            raise RuntimeError("localkube's thread did not end within 30 s of stop")

    def __enter__(self) -> LocalKube:
        return self.start_in_thread()

    def __exit__(self, *exc: object) -> None:
        self.stop_thread()

    def _in_loop_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `fn` (sync or async) on the cluster's loop and return its result; thread-safe."""
        if self.loop is None:
            raise RuntimeError("the cluster is not running")
        if self._in_loop_thread():
            if asyncio.iscoroutinefunction(fn):
                raise RuntimeError(
                    "call() of a coroutine function from the cluster's own loop: await it instead"
                )
            return fn(*args, **kwargs)

        async def run() -> Any:
            result = fn(*args, **kwargs)
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(60)

    # -- clients -------------------------------------------------------------------------------------------
    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        if not self.url:
            raise RuntimeError("start the cluster before writing its kubeconfig")
        self.kubeconfig = write_kubeconfig(path, self.url, self.token, namespace)
        return self.kubeconfig

    def write_requests(self) -> list[RequestRecord]:
        """The recorded POST/PUT/PATCH/DELETE requests."""
        return [record for record in self.requests if record.is_write]
