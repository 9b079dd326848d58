"""docs/design.md's module map matches the tree: every module or folder it names exists, and every package of
both distributions (the provider and localkube) is named.

The map is the first fenced block under ``## Module map``. A line whose first word ends in ``/`` or ``.py``
names an entry; its indentation (two spaces a level) puts it under the folder above it. Other lines continue
the description above them. The top-level entries are paths from the repository root.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
PACKAGE_ROOTS = (ROOT / "airflow_provider_training", ROOT / "localkube" / "src" / "localkube")
_ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[\w./-]+(?:/|\.py))(?:\s|$)")


def map_block(text: str) -> list[str]:
    after = text.split("\n## Module map\n", 1)[1]
    return after.split("```", 2)[1].splitlines()[1:]


def named_paths(lines: list[str]) -> list[Path]:
    """The path of every entry, its parents taken from the entries above it."""
    parents: list[tuple[int, Path]] = []  # (indent, folder)
    paths = []
    for line in lines:
        found = _ENTRY.match(line)
        if found is None:
            continue
        indent = len(found["indent"])
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = (parents[-1][1] if parents else ROOT) / found["name"].rstrip("/")
        paths.append(path)
        if found["name"].endswith("/"):
            parents.append((indent, path))
    return paths


def test_every_module_the_map_names_exists() -> None:
    paths = named_paths(map_block(DESIGN.read_text()))
    assert len(paths) > 40
    missing = [str(p.relative_to(ROOT)) for p in paths if not p.exists()]
    assert missing == []


def test_every_package_is_named() -> None:
    named = set(named_paths(map_block(DESIGN.read_text())))
    packages = {init.parent for root in PACKAGE_ROOTS for init in root.rglob("__init__.py")}
    packages = {p for p in packages if "www" not in p.relative_to(ROOT).parts}
    assert len(packages) > 10
    unnamed = sorted(str(p.relative_to(ROOT)) for p in packages - named)
    assert unnamed == []


def test_the_reader_places_entries_under_their_folders() -> None:
    lines = [
        "pkg/              the package",
        "  sub/            a folder",
        "    one.py        a module",
        "                  whose description goes on",
        "  two.py          back one level",
    ]
    assert named_paths(lines) == [
        ROOT / "pkg",
        ROOT / "pkg/sub",
        ROOT / "pkg/sub/one.py",
        ROOT / "pkg/two.py",
    ]
