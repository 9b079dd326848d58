"""The provider package at a git revision, for the benchmarks that print a baseline beside this tree.

``baseline_tree(ref)`` exports ``airflow_provider_training`` at ``ref`` once into the cache
(``~/.cache/airflow-provider-training/baseline-<ref>``, kept between runs; nothing of the work tree changes).
Put the folder it returns first on a child process's ``PYTHONPATH`` to measure that revision's code.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path.home() / ".cache/airflow-provider-training"


def baseline_tree(ref: str) -> Path:
    """The folder holding ``airflow_provider_training`` as it was at ``ref``."""
    tree = CACHE / f"baseline-{ref}"
    if not (tree / "airflow_provider_training").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", ref, "airflow_provider_training"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree
