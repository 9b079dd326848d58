"""No step of a TrainingJobTrigger holds the triggerer's event loop for more than 1 s (issue 8, point 5).

Each case runs the triggers in a fresh interpreter set up as a triggerer's trigger runner (the scenario code
of ``benchmarks/loop_lag.py``, which also measures the loop's lag with a probe). Every step the loop runs (a
callback, or a task's run between two suspensions) is timed in the loop thread's CPU time, so that the
machine's load does not count, and the test fails on any step that computed for more than 1 s. The first
trigger's imports (the Kubernetes client: seconds) happen in that interpreter, as on a fresh triggerer.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

STEP_LIMIT = 1.0  # seconds: the threshold for one step, far above what a step takes (< 0.1 s)
BACKLOG_LINES = 50_000
STARTING_TRIGGERS = 20


@pytest.fixture(scope="module")
def scenarios() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "loop_lag.py"
    spec = importlib.util.spec_from_file_location("loop_lag", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["loop_lag"] = module
    spec.loader.exec_module(module)
    module.warm_up(None)  # bytecode, as a deployment has it (this environment may not write any)
    return module


@pytest.fixture
def cluster(scenarios: ModuleType, tmp_path: Path) -> Any:
    cluster = scenarios.Cluster(tmp_path)
    yield cluster
    cluster.stop()


def assert_no_slow_step(result: dict[str, Any]) -> None:
    over = result["steps_over_limit"]
    assert over == [], "steps held the loop for more than 1 s:\n" + "\n".join(over)


def test_triggers_starting_on_a_fresh_triggerer_and_a_finished_backlog(scenarios: ModuleType, cluster: Any):
    """Triggers start at once in a fresh process (first imports), one of them reading a finished pod's
    50,000-line log (read as one answer: the split and the emission are the steps at stake)."""
    names, lines = scenarios.start_jobs(cluster, STARTING_TRIGGERS, 1.0)
    names.append(scenarios.backlog_job(cluster, BACKLOG_LINES, running=False))

    result = scenarios.run_child(names, lines + BACKLOG_LINES, cluster, timeout=120, step_limit=STEP_LIMIT)

    assert result["fresh"], "the Kubernetes client was imported before the triggers ran"
    assert result["events"] == {"success": STARTING_TRIGGERS + 1}
    # The finished pod's log is read in the final flush, which waiting.LOG_FLUSH_SECONDS bounds: how much of
    # it is logged by then depends on the machine's speed; that its reading began is certain.
    assert result["lines"] > lines
    assert_no_slow_step(result)


def test_replaying_a_running_pods_backlog(scenarios: ModuleType, cluster: Any):
    """One trigger follows a running pod that already wrote 50,000 lines; cancelled once all are logged."""
    name = scenarios.backlog_job(cluster, BACKLOG_LINES, running=True)

    result = scenarios.run_child(
        [name], BACKLOG_LINES, cluster, cancel=True, timeout=120, step_limit=STEP_LIMIT
    )

    assert result["lines"] == BACKLOG_LINES
    assert result["events"] == {"cancelled after the backlog": 1}
    assert_no_slow_step(result)
