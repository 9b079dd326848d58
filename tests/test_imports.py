"""DAG files import our operators and sensors at parse time: that must not load any Kubernetes client."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "kubernetes",
    "kubernetes_asyncio",
    "aiohttp",
    "airflow_provider_training.specs",
    "airflow_provider_training.hooks.training",
    "airflow_provider_training.watch",
    "airflow_provider_training.plugins.ui_api",  # the Training tab's app: the api-server builds it lazily
    "fastapi",
)


@pytest.mark.parametrize(
    "module",
    [
        "airflow_provider_training.operators",
        "airflow_provider_training.sensors",
        "airflow_provider_training.plugins",  # every Airflow component loads the plugin
    ],
)
def test_parse_time_imports_load_no_client(module):
    code = (
        f"import sys, json, {module}\n"
        f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"importing {module} loaded {loaded}"


def test_the_check_sees_a_client_import():
    """The probe above would notice a client import (guards against a check that cannot fail)."""
    code = (
        "import sys, json, airflow_provider_training.operators, airflow_provider_training.hooks.training\n"
        f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "airflow_provider_training.hooks.training" in json.loads(out.stdout.strip().splitlines()[-1])


RUNTIME = """
import asyncio, json, sys, tempfile
from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.kinds.registry import get_kind
from localkube.cluster import LocalKube

async def main():
    async with LocalKube(runtime=None, controllers=[]) as cluster:
        path = cluster.write_kubeconfig(tempfile.mkdtemp() + "/kubeconfig")
        hook = AsyncTrainingJobHook(None, config_file=str(path))
        try:
            assert await hook.get_object(get_kind("PyTorchJob").resource, "absent", "default") is None
        finally:
            await hook.close()

asyncio.run(main())
print(json.dumps(sorted(m for m in ("kubernetes", "kubernetes_asyncio") if m in sys.modules)))
"""


def test_requests_with_a_static_kubeconfig_load_no_client():
    """The hook reads a token kubeconfig and talks HTTP itself: importing a client costs a cold worker or
    triggerer 2 to 3 s (the first submit, the first trigger), so a request must not load one."""
    out = subprocess.run([sys.executable, "-c", RUNTIME], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
