"""Pod runtimes: the kubelet's part of localkube. Controllers create pods; a runtime makes them run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from localkube.gates import close_gate, open_gate
from localkube.runtime.script import ANNOTATION, register_script, unregister_script

if TYPE_CHECKING:
    from localkube.api import ClusterContext

__all__ = [
    "ANNOTATION",
    "PodRuntime",
    "close_gate",
    "make_runtime",
    "open_gate",
    "register_script",
    "unregister_script",
]


class PodRuntime(Protocol):
    async def run(self, cluster: ClusterContext) -> None:
        """Long-running: drive every pod (phases, container states, logs, exit codes, events)."""


def make_runtime(name: str) -> PodRuntime:
    """`scripted` (deterministic timelines) or `process` (each container as a local process)."""
    if name == "scripted":
        from localkube.runtime.scripted import ScriptedRuntime

        return ScriptedRuntime()
    if name == "process":
        from localkube.runtime.process import ProcessRuntime

        return ProcessRuntime()
    raise ValueError(f"unknown pod runtime {name!r}: expected 'scripted' or 'process'")
