"""The committed Training tab bundle (``plugins/www/dist/main.umd.cjs``) is what its sources build, byte for
byte, and the wheel ships it: ``pip install`` needs no node.

Rebuilding needs node and the locked packages (``make ui-install``, which ``make test`` runs first); without
node the rebuild check is skipped with that reason. After changing ``plugins/www/src``, run ``make ui-build``
and commit ``dist/main.umd.cjs``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

WWW = Path(__file__).resolve().parents[2] / "airflow_provider_training" / "plugins" / "www"
BUNDLE = WWW / "dist" / "main.umd.cjs"
ROOT = WWW.parents[2]


def test_the_bundle_is_committed_and_names_the_plugin_global() -> None:
    text = BUNDLE.read_text()
    assert "AirflowPlugin" in text
    for host_global in ("ReactJSXRuntime", "ChakraUI", "React"):  # the host's libraries, not bundled copies
        assert f"e.{host_global}" in text or f".{host_global})" in text, host_global
    assert BUNDLE.stat().st_size < 100_000, "React or Chakra got bundled instead of taken from the host"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed: cannot rebuild the bundle")
def test_the_committed_bundle_matches_its_sources(tmp_path: Path) -> None:
    if not (WWW / "node_modules" / ".bin" / "vite").exists():
        pytest.fail(f"run `make ui-install` (npm ci in {WWW}) first")
    env = {**os.environ, "TRAINING_UI_OUT_DIR": str(tmp_path)}
    build = subprocess.run(
        [str(WWW / "node_modules" / ".bin" / "vite"), "build", "--logLevel", "warn"],
        cwd=WWW,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    rebuilt = (tmp_path / "main.umd.cjs").read_bytes()
    assert rebuilt == BUNDLE.read_bytes(), (
        "dist/main.umd.cjs differs from what plugins/www/src builds: run `make ui-build` and commit it"
    )


def test_the_wheel_ships_the_bundle_and_no_front_end_sources(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "uv", "build", "--wheel", "--out-dir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "airflow_provider_training/plugins/www/dist/main.umd.cjs" in names
    assert not [n for n in names if "node_modules" in n or n.endswith((".ts", ".tsx"))]
