"""The provider's parts import each other in one direction only: the operators, sensors and decorators build a
wait and finish it through modules of their own (``job_wait``, ``completion``), the trigger runs it, and none
of them reaches back to another. ``kinds/`` (what each job is) knows nothing of ``specs/`` (how one is built).

Every import counts: at the top of a module, inside a function, under ``TYPE_CHECKING``, and a module named
by its dotted name in a string (``import_off_loop``'s list, the registry's family modules).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "airflow_provider_training"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
WIRING = ("operators", "sensors", "triggers", "decorators")


def module_names() -> dict[str, Path]:
    """Every module of the provider by dotted name (a package by its own name)."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(path: Path, modules: set[str]) -> set[str]:
    """The provider's modules that the module at ``path`` imports, anywhere in it."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # a submodule by its name
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return {name for name in names if name in modules and name != PACKAGE}


def part(module: str) -> str:
    """The part a module belongs to: its package under the provider (``operators``), else the module itself
    (``completion``)."""
    return module.split(".")[1]


def part_graph() -> dict[str, set[str]]:
    modules = module_names()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if name == PACKAGE:
            continue
        targets = {part(target) for target in imported(path, set(modules))}
        graph.setdefault(part(name), set()).update(targets - {part(name)})
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of more than one node (Tarjan), each as its sorted nodes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_provider_parts_import_each_other_without_a_cycle() -> None:
    graph = part_graph()
    assert set(WIRING) <= set(graph)
    assert cycles(graph) == []


@pytest.mark.parametrize("wiring", WIRING)
def test_no_part_reaches_back_to_the_operators_sensors_triggers_or_decorators(wiring: str) -> None:
    """What a part imports, directly or through other parts, never leads back to it."""
    graph = part_graph()
    reached, todo = set(), list(graph[wiring])
    while todo:
        node = todo.pop()
        if node not in reached:
            reached.add(node)
            todo.extend(graph.get(node, ()))
    assert wiring not in reached


def test_kinds_import_nothing_from_specs() -> None:
    assert "specs" not in part_graph()["kinds"]


def test_the_check_sees_imports_inside_functions_and_in_strings(tmp_path: Path) -> None:
    """Guards against a check that cannot fail: a function-level import and a module named in a string are
    both edges, and a cycle through them is reported."""
    source = tmp_path / "module.py"
    source.write_text(
        "def later():\n"
        "    from airflow_provider_training.triggers.training import TrainingJobTrigger\n"
        "RUNTIME = ('airflow_provider_training.decorators.shipping',)\n"
    )
    modules = set(module_names())
    assert imported(source, modules) == {
        "airflow_provider_training.triggers.training",
        "airflow_provider_training.decorators.shipping",
    }
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
