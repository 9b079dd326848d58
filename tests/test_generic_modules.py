"""The generic code knows no family (the architecture's rule, issue 13's acceptance): outside the kind
modules, the spec models and the thin per-family operator, sensor and decorator modules, no identifier and no
string (docstrings and comments aside: they may give examples) names a registered kind, its plural, its API
group or a family module. The words come from the registry, so a new family is checked as it is added."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import airflow_provider_training
from airflow_provider_training.kinds.registry import all_kinds

PACKAGE = Path(airflow_provider_training.__file__).parent
FAMILY_MODULES = {p.stem for p in (PACKAGE / "kinds").glob("*.py")} - {"__init__", "base", "common"}
FAMILY_MODULES -= {"registry", "selectors", "errors"}
# Where family names belong: the kinds and their spec models, the per-family modules, the packages'
# re-exports of them, the decorators named after a kind, and the provider's registration of all of them.
FAMILY_PLACES = {"kinds", "specs"}
FAMILY_FILES = {"pytorch_job.py", "train_job.py", "provider_info.py"}
# Words of the generic vocabulary that a family also uses: PaddlePaddle EDL's kind is ``TrainingJob``
# (the provider's TrainingJobOperator is every family's), T9k's group is ``batch.tensorstack.dev``.
GENERIC_WORDS = {"trainingjob", "trainingjobs", "batch"}


def family_words() -> set[str]:
    words = set(FAMILY_MODULES)
    for kind in all_kinds():
        ref = kind.resource
        words |= {ref.kind.lower(), ref.plural.lower(), ref.group.split(".")[0].lower()}
    return {w for w in words if len(w) > 3} - GENERIC_WORDS


def generic_modules() -> list[Path]:
    modules = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in FAMILY_PLACES or path.name in FAMILY_FILES:
            continue
        if path.stem in FAMILY_MODULES or (path.name == "__init__.py" and relative.parts[0] != "__init__.py"):
            continue  # operators/kubeflow.py, sensors/__init__.py (the re-exports)
        modules.append(path)
    return modules


def names_and_strings(tree: ast.AST) -> list[str]:
    """Every identifier, attribute, argument, import and non-docstring string constant of ``tree``."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append(node.value)
        elif isinstance(node, ast.Name):
            found.append(node.id)
        elif isinstance(node, ast.Attribute):
            found.append(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.alias):
            found.append(node.name)
        elif isinstance(node, ast.arg):
            found.append(node.arg)
    return found


def test_the_generic_set_covers_hooks_triggers_waiting_operators_and_sensors():
    names = {str(p.relative_to(PACKAGE)) for p in generic_modules()}
    assert {"waiting.py", "watch.py", "logs.py", "operators/training.py", "sensors/training.py"} <= names
    assert {"hooks/training.py", "triggers/training.py", "operators/control.py"} <= names
    assert not names & {"operators/kubeflow.py", "kinds/trainer.py", "sensors/__init__.py"}


def test_the_words_include_every_family():
    words = family_words()
    assert {"pytorchjob", "trainjob", "kubeflow", "tensorstack", "paddlepaddle", "mpi_operator"} <= words


@pytest.mark.parametrize("path", generic_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_family_name_in_generic_code(path: Path):
    pattern = re.compile("|".join(sorted(map(re.escape, family_words()))), re.IGNORECASE)
    hits = sorted({text for text in names_and_strings(ast.parse(path.read_text())) if pattern.search(text)})
    assert not hits, f"{path.relative_to(PACKAGE)} names a family: {hits}"


def test_the_check_sees_a_family_name():
    tree = ast.parse('"""PyTorchJob in a docstring is fine."""\nKIND = "PyTorchJob"\n')
    pattern = re.compile("|".join(map(re.escape, family_words())), re.IGNORECASE)
    assert [t for t in names_and_strings(tree) if pattern.search(t)] == ["PyTorchJob"]
