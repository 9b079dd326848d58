"""What the provider's distribution contains and needs: localkube (the test cluster) is its own
distribution, which the provider neither ships, imports nor requires outside its test and demo extras."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from airflow_provider_training import get_provider_info, testing

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "airflow_provider_training"


def test_provider_info_names_the_distribution():
    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-training"
    assert info["name"]


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_provider_module_imports_localkube():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50  # the walk sees the package
    importing = [str(m.relative_to(ROOT)) for m in modules if "localkube" in _imported_roots(m)]
    assert importing == []
    # and the check sees such an import
    assert "localkube" in _imported_roots(ROOT / "localkube" / "tests" / "conftest.py")


def test_the_scripted_job_helper_uses_localkube_runtime_names():
    from localkube.runtime.script import ANNOTATION

    assert testing.SCRIPT_ANNOTATION == ANNOTATION


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The provider's wheel, built from its sdist (as a release is) by uv, which `make test` installs."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    assert uv is not None
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([uv, "build", "--quiet", "--out-dir", str(out), str(ROOT)], check=True)
    (built,) = out.glob("airflow_provider_training-*.whl")
    return built


def test_the_wheel_holds_no_localkube_code(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("airflow_provider_training/watch.py") for n in names)
    assert any(n.endswith("plugins/www/dist/main.umd.cjs") for n in names)
    assert [n for n in names if "localkube" in n] == []
    assert not any(n.startswith("tests/") for n in names)


def test_the_wheel_requires_localkube_and_its_server_dependencies_only_for_tests(wheel: Path):
    archive = zipfile.ZipFile(wheel)
    (metadata,) = (n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    requires = Parser().parsestr(archive.read(metadata).decode()).get_all("Requires-Dist") or []
    unconditional = {r.split(";")[0].split("<")[0].split(">")[0].strip() for r in requires if ";" not in r}
    assert not unconditional & {"localkube", "jsonpatch", "jsonschema"}
    assert "kubernetes_asyncio" not in unconditional  # exec and oidc credentials are the provider's own
    assert 'localkube; extra == "test"' in requires
