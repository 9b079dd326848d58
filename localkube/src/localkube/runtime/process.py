"""The process pod runtime: each container's command runs as a local process.

The process gets the env the operator injected (references resolved, cluster addresses rewritten to
127.0.0.1 and per-replica local ports, see `network.py`), `HOSTNAME` set to the pod name, and a small
allow-list of the host's variables (PATH, HOME, locale, PYTHONPATH, ...). `python`/`python3` run with the
current interpreter. stdout and stderr stream into the pod log line by line; the exit code becomes the
container's terminated state (a signal N gives 128+N). The working directory is a temporary directory per pod.
The image is ignored, and so are init containers (reported Completed). Deleting the pod terminates the
process group (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from localkube.runtime.envvars import expand, resolve_env
from localkube.runtime.kubelet import Kubelet, PodInstance, RunResult, StartFailure
from localkube.runtime.network import LocalNetwork

HOST_VARIABLES = (
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SYSTEMROOT",
    "PYTHONPATH",
)
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
READ_SIZE = 65536
MAX_LINE = 1 << 20


class _Done:
    async def wait(self) -> RunResult:
        return RunResult(0)


class _ProcessRun:
    """A started process: its output goes to the pod log until it exits."""

    def __init__(
        self, runtime: ProcessRuntime, inst: PodInstance, container: str, proc: asyncio.subprocess.Process
    ):
        self.runtime, self.inst, self.container, self.proc = runtime, inst, container, proc

    async def wait(self) -> RunResult:
        assert self.proc.stdout is not None
        try:
            pending = b""
            while chunk := await self.proc.stdout.read(READ_SIZE):
                pending += chunk
                complete, _, pending = pending.rpartition(b"\n")
                if complete:
                    self._write(complete + b"\n")
                if len(pending) > MAX_LINE:
                    self._write(pending)
                    pending = b""
            if pending:
                self._write(pending)
            code = await self.proc.wait()
        except asyncio.CancelledError:
            self.runtime.terminate(self.proc)
            raise
        return RunResult(code if code >= 0 else 128 - code)

    def _write(self, data: bytes) -> None:
        if self.inst.alive:
            self.runtime.logs.write(
                self.inst.namespace, self.inst.name, self.container, data.decode("utf-8", "replace")
            )


class ProcessRuntime(Kubelet):
    """Runs every container's command as a local process group."""

    first_backoff, max_backoff = 0.1, 5.0
    grace_period = 2.0

    def __init__(self) -> None:
        super().__init__()
        self.network = LocalNetwork()
        self.workdirs: dict[str, Path] = {}
        self._reapers: set[asyncio.Task] = set()

    async def launch(
        self, inst: PodInstance, container: dict, attempt: int, *, init: bool
    ) -> _Done | _ProcessRun:
        if init:
            return _Done()
        env = self.network.rewriter(self.store, inst.pod).rewrite(
            resolve_env(self.store, inst.pod, container)
        )
        argv = self.command_line(container, env)
        host_env = {name: os.environ[name] for name in HOST_VARIABLES if name in os.environ}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**host_env, "HOSTNAME": inst.name, **env},
                cwd=self._workdir(inst),
                start_new_session=True,
            )
        except OSError as exc:
            raise StartFailure(
                f'failed to create containerd task: exec: "{argv[0]}": {exc.strerror or exc}'
            ) from exc
        return _ProcessRun(self, inst, container["name"], proc)

    @staticmethod
    def command_line(container: dict, env: dict[str, str]) -> list[str]:
        """`command` + `args` with `$(VAR)` expanded; `python*` becomes this interpreter."""
        command = list(container.get("command") or [])
        if not command:
            raise StartFailure(
                "no command: the process runtime cannot run an image's entrypoint; set `command`"
            )
        argv = [expand(str(part), env) for part in command + list(container.get("args") or [])]
        if _PYTHON.match(os.path.basename(argv[0])):
            argv[0] = sys.executable
        return argv

    def _workdir(self, inst: PodInstance) -> Path:
        if inst.uid not in self.workdirs:
            self.workdirs[inst.uid] = Path(
                tempfile.mkdtemp(prefix=f"localkube-{inst.namespace}-{inst.name}-")
            )
        return self.workdirs[inst.uid]

    def terminate(self, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM the process group now; SIGKILL it if it is still there after the grace period."""
        if proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        reaper = asyncio.get_running_loop().create_task(self._reap(proc))
        self._reapers.add(reaper)
        reaper.add_done_callback(self._reapers.discard)

    async def _reap(self, proc: asyncio.subprocess.Process) -> None:
        try:
            await asyncio.wait_for(proc.wait(), self.grace_period)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()

    def pod_stopped(self, inst: PodInstance) -> None:
        workdir = self.workdirs.pop(inst.uid, None)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    async def close(self) -> None:
        await asyncio.gather(*self._reapers, return_exceptions=True)
        for workdir in self.workdirs.values():
            shutil.rmtree(workdir, ignore_errors=True)
        self.workdirs.clear()
