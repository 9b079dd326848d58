"""Chromium driven from a test, one command at a time, through ``drive.cjs`` (playwright-core in node).

The test decides when each step happens (after it opened a localkube gate, say); each command waits only on
the page, bounded by its timeout. Needs node, ``make ui-install`` (playwright-core) and ``/usr/bin/chromium``
(``make chromium``); :func:`missing` says what is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

DRIVER = Path(__file__).with_name("drive.cjs")
WWW = Path(__file__).resolve().parents[3] / "airflow_provider_training" / "plugins" / "www"
NODE_MODULES = WWW / "node_modules"
CHROMIUM = Path("/usr/bin/chromium")
TIMEOUT_MS = 30_000


def missing() -> str | None:
    """Why the browser cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (NODE_MODULES / "playwright-core").is_dir():
        return "playwright-core is not installed: run `make ui-install`"
    if not CHROMIUM.exists():
        return "/usr/bin/chromium is not installed: run `make chromium`"
    return None


class Chromium:
    """One browser profile at a time (:meth:`open` starts a fresh one: a new user, no cookies)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._stderr = log.open("ab")
        self._process = subprocess.Popen(
            ["node", str(DRIVER)],
            env={**os.environ, "NODE_PATH": str(NODE_MODULES), "CHROMIUM": str(CHROMIUM)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )

    def command(self, command: str, **args: Any) -> Any:
        assert self._process.stdin is not None and self._process.stdout is not None
        args.setdefault("timeout", TIMEOUT_MS)
        self._process.stdin.write(json.dumps({"command": command, **args}) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise AssertionError(f"the browser driver exited ({self._process.wait()}): see {self.log}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise AssertionError(f"browser {command} {args}: {answer['error']}")
        return answer["value"]

    def open(self, color_scheme: str = "light") -> None:
        self.command("open", colorScheme=color_scheme)

    def login(self, base: str, username: str, password: str, next_url: str) -> str:
        return self.command("login", base=base, username=username, password=password, next=next_url)

    def goto(self, url: str) -> None:
        self.command("goto", url=url)

    def wait(self, *, testid: str | None = None, css: str | None = None, text: str | None = None) -> str:
        return self.command("wait", testid=testid, css=css, text=text)

    def attribute(self, name: str, *, testid: str) -> str | None:
        return self.command("attribute", name=name, testid=testid)

    def texts(self, *, testid: str | None = None, css: str | None = None) -> list[str]:
        return self.command("texts", testid=testid, css=css)

    def click(self, *, testid: str | None = None, css: str | None = None, text: str | None = None) -> None:
        self.command("click", testid=testid, css=css, text=text)

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.command("screenshot", path=str(path))

    def close(self) -> None:
        try:
            if self._process.poll() is None:
                self.command("close")
                assert self._process.stdin is not None
                self._process.stdin.close()
                self._process.wait(timeout=30)
        finally:
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()
            self._stderr.close()
