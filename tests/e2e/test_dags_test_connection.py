"""``airflow dags test`` of a deferrable training DAG whose ``kubernetes_default`` is stored in the metadata
DB (``airflow connections add``), not in the environment, and no ``~/.kube/config`` to fall back on.

The command runs the deferred task's trigger in its own process, where the Task SDK's async connection
lookup finds nothing; the trigger used to take that for a missing ``kubernetes_default`` and fail on
``~/.kube/config``. The real CLI runs as a subprocess on a fresh SQLite AIRFLOW_HOME against localkube.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from localkube.cluster import LocalKube

from tests.e2e.conftest import DAG_FILES, airflow_env, free_port

pytestmark = pytest.mark.timeout(600)  # three Airflow commands on a busy machine


def airflow_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow", *args],
        env=env,
        cwd=env["AIRFLOW_HOME"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )


def test_dags_test_finds_the_connection_in_the_metadata_db(kube: LocalKube, tmp_path: Path) -> None:
    assert kube.kubeconfig is not None
    home, user_home = tmp_path / "airflow", tmp_path / "user"
    (home / "dags").mkdir(parents=True)
    user_home.mkdir()  # no .kube/config here
    shutil.copy(DAG_FILES / "e2e_train.py", home / "dags")
    env = airflow_env(home, free_port(), connection="")
    del env["AIRFLOW_CONN_KUBERNETES_DEFAULT"]  # the connection is the DB's only
    env["HOME"] = str(user_home)

    migrate = airflow_cli(env, "db", "migrate")
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    extra = json.dumps({"kube_config_path": str(kube.kubeconfig)})
    added = airflow_cli(
        env, "connections", "add", "kubernetes_default", "--conn-type", "kubernetes", "--conn-extra", extra
    )
    assert added.returncode == 0, added.stdout[-3000:] + added.stderr[-3000:]

    run = airflow_cli(env, "dags", "test", "e2e_train")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    assert "[DAG TEST] running trigger in line" in output  # the task deferred and its trigger ran here
    assert "PyTorchJob default/e2e-train is Succeeded" in output
    assert "~/.kube/config" not in output
    created = [r for r in kube.requests if r.method == "POST" and r.path.endswith("/pytorchjobs")]
    assert len(created) == 1
