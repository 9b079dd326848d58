"""Test-wide settings: a private AIRFLOW_HOME so tests never touch a user's Airflow."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_home = tempfile.mkdtemp(prefix="apt-airflow-home-")
atexit.register(shutil.rmtree, _home, ignore_errors=True)
os.environ.setdefault("AIRFLOW_HOME", _home)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{_home}/airflow.db")

# tests/real runs against a real kube-apiserver that `make test-real` builds and names in REALKUBE_BIN;
# without it (`make test`) nothing there is collected.
collect_ignore = [] if os.environ.get("REALKUBE_BIN") else ["real"]
