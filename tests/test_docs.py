"""Keeps the docs honest: the operator reference matches the code, and the docs' links and names resolve.

``docs/operators.md`` convention, machine-read here:

- a class is documented under a level-3 heading holding just its name in backticks:
  ``### `PyTorchJobOperator` ``;
- its own parameters (those of our own ``__init__``s along the MRO) are rows of a table whose first header
  cell is ``Parameter``; the first column of each row is the name in backticks, then type, default, meaning.
  A default cell that is one Python literal in backticks (``"Succeeded"``, ``None``, ``5.0``) must equal the
  signature's default; ``required`` means no default; anything else is prose and not compared;
- Airflow's own parameters worth knowing go in a table whose first header cell is ``Airflow parameter``: they
  must exist in the full signature (Airflow's base classes included), but need not be complete;
- a class that only fixes defaults of a documented base class says so in a line
  ``Parameters: those of [`TrainingJobOperator`](#trainingjoboperator)`` (the base must be in its MRO and be
  documented); its own table, if any, adds the parameters the base does not have;
- ``Templated fields: `job`, `job_name` `` (or ``Templated fields: none``) must equal ``template_fields``;
  a class without the line takes the base's.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE = DOCS / "operators.md"
EXPORTING_MODULES = ("airflow_provider_training.operators", "airflow_provider_training.sensors")

_CLASS_HEADING = re.compile(r"^###\s+`(?P<name>[A-Za-z_]\w*)`\s*$")
_ANY_HEADING = re.compile(r"^#{1,6}\s")
_ROW = re.compile(r"^\|(?P<cells>.*)\|\s*$")
_INHERITS = re.compile(r"^Parameters: those of \[`(?P<base>\w+)`\]\(#(?P<anchor>[\w-]+)\)")
_TEMPLATED = re.compile(r"^Templated fields: (?P<fields>.*)$")
_TICKED = re.compile(r"`([^`]+)`")
_NO_DEFAULT = inspect.Parameter.empty


@dataclass
class Section:
    """What the reference says about one class."""

    name: str
    params: dict[str, str] = field(default_factory=dict)  # name -> default cell
    airflow_params: set[str] = field(default_factory=set)
    base: str | None = None
    anchor: str | None = None
    templated: set[str] | None = None


def parse_reference(text: str) -> dict[str, Section]:
    """The class sections of an operator reference written in the convention above."""
    sections: dict[str, Section] = {}
    current: Section | None = None
    table: str | None = None  # "own", "airflow" or None (a table we do not read)
    header_next = False
    for raw in text.splitlines():
        line = raw.strip()
        heading = _CLASS_HEADING.match(line)
        if heading:
            current = sections.setdefault(heading["name"], Section(heading["name"]))
            table = None
            continue
        if _ANY_HEADING.match(line):
            current, table = None, None
            continue
        if current is None:
            continue
        row = _ROW.match(line)
        if not row:
            table, header_next = None, False
            if inherits := _INHERITS.match(line):
                current.base, current.anchor = inherits["base"], inherits["anchor"]
            elif templated := _TEMPLATED.match(line):
                current.templated = set(_TICKED.findall(templated["fields"]))
            continue
        cells = [cell.strip() for cell in row["cells"].split("|")]
        if table is None and not header_next:  # a header row
            first = cells[0].lower()
            table = {"parameter": "own", "airflow parameter": "airflow"}.get(first, "other")
            header_next = True
            continue
        if header_next:  # the |---| separator
            header_next = False
            continue
        name = _TICKED.fullmatch(cells[0])
        if name is None or table == "other":
            continue
        if table == "own":
            current.params[name[1]] = cells[2] if len(cells) > 2 else ""
        else:
            current.airflow_params.add(name[1])
    return sections


def _is_own(cls: type) -> bool:
    """Our classes (also ones a test defines), as opposed to Airflow's bases and ``object``."""
    return cls is not object and not cls.__module__.startswith(("airflow.", "builtins"))


def own_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The named parameters of our own ``__init__``s along the MRO, most derived first.

    The walk stops at an ``__init__`` without ``**kwargs``: nothing above it can be passed through.
    """
    found: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if not _is_own(klass) or "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        for param in params:
            if param.name != "self" and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                found.setdefault(param.name, param)
        if not any(param.kind == param.VAR_KEYWORD for param in params):
            break
    return found


def all_parameters(cls: type) -> set[str]:
    """Every ``__init__`` parameter name along the whole MRO, Airflow's base classes included."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is not None and klass is not object:
            names.update(inspect.signature(init).parameters)
    return names


def documented_parameters(section: Section, sections: dict[str, Section]) -> dict[str, str]:
    """The section's own table plus, through ``Parameters: those of``, its base's (recursively)."""
    params: dict[str, str] = {}
    seen: set[str] = set()
    current: Section | None = section
    while current is not None and current.name not in seen:
        seen.add(current.name)
        for name, default in current.params.items():
            params.setdefault(name, default)
        current = sections.get(current.base) if current.base else None
    return params


def templated_fields(section: Section, sections: dict[str, Section]) -> set[str] | None:
    current: Section | None = section
    seen: set[str] = set()
    while current is not None and current.name not in seen:
        seen.add(current.name)
        if current.templated is not None:
            return current.templated - {"none"}
        current = sections.get(current.base) if current.base else None
    return None


def default_problem(name: str, cell: str, param: inspect.Parameter) -> str | None:
    """Compare a default cell with the signature when the cell is ``required`` or one literal."""
    if cell.lower() == "required":
        return None if param.default is _NO_DEFAULT else f"`{name}` is documented as required"
    literal = _TICKED.fullmatch(cell)
    if literal is None:
        return None  # prose, e.g. "from `[training] startup_timeout`"
    try:
        value = ast.literal_eval(literal[1])
    except (ValueError, SyntaxError):
        return None
    if param.default is _NO_DEFAULT:
        return f"`{name}` is documented with default {cell} but is required"
    if value != param.default or type(value) is not type(param.default):
        return f"`{name}` is documented with default {cell} but defaults to {param.default!r}"
    return None


def class_problems(cls: type, section: Section, sections: dict[str, Section]) -> list[str]:
    """Everything about one class where the reference and the code disagree."""
    where = f"{section.name}:"
    problems: list[str] = []
    if section.base is not None:
        base = sections.get(section.base)
        if base is None:
            problems.append(f"{where} its parameters point to {section.base}, which is not documented")
        elif section.base not in {klass.__name__ for klass in cls.__mro__[1:]}:
            problems.append(f"{where} its parameters point to {section.base}, which is not a base class")
        if section.anchor != section.base.lower():
            problems.append(f"{where} the link to {section.base} has anchor #{section.anchor}")
    signature = own_parameters(cls)
    documented = documented_parameters(section, sections)
    for name in sorted(set(documented) - set(signature)):
        problems.append(f"{where} documents `{name}`, which its __init__ does not take")
    for name in sorted(set(signature) - set(documented)):
        problems.append(f"{where} parameter `{name}` is not documented")
    for name in sorted(set(documented) & set(signature)):
        if problem := default_problem(name, documented[name], signature[name]):
            problems.append(f"{where} {problem}")
    for name in sorted(section.airflow_params - all_parameters(cls)):
        problems.append(f"{where} documents Airflow parameter `{name}`, which it does not take")
    if not hasattr(cls, "template_fields"):  # a trigger
        return problems
    templated = templated_fields(section, sections)
    actual = set(cls.template_fields)
    if templated is None:
        problems.append(f"{where} no 'Templated fields:' line (here or in its base's section)")
    elif templated != actual:
        problems.append(f"{where} templated fields documented {sorted(templated)}, actual {sorted(actual)}")
    return problems


def exported_classes(modules: Iterable[str] = EXPORTING_MODULES) -> dict[str, type]:
    """Every operator and sensor class the public modules export."""
    from airflow.sdk import BaseOperator

    classes: dict[str, type] = {}
    for module_name in modules:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, BaseOperator):
                classes[name] = obj
    return classes


def reference_problems(sections: dict[str, Section], classes: dict[str, type]) -> list[str]:
    problems = [f"{name}: documented, but not exported" for name in sorted(set(sections) - set(classes))]
    problems += [f"{name}: exported, but not documented" for name in sorted(set(classes) - set(sections))]
    for name in sorted(set(sections) & set(classes)):
        problems += class_problems(classes[name], sections[name], sections)
    return problems


# -- the reference against the code ----------------------------------------------------------------------


def test_operator_reference_matches_the_code() -> None:
    sections = parse_reference(REFERENCE.read_text())
    classes = exported_classes()
    assert len(classes) >= 16  # the generic operator and sensor, and seven Kubeflow kinds of each
    assert reference_problems(sections, classes) == []


def test_trigger_reference_matches_the_code() -> None:
    from airflow_provider_training.triggers.training import TrainingJobTrigger

    sections = parse_reference((DOCS / "triggers.md").read_text())
    assert reference_problems(sections, {"TrainingJobTrigger": TrainingJobTrigger}) == []


# -- the checker itself catches what it must --------------------------------------------------------------


class _Generic:
    template_fields = ("job",)

    def __init__(self, *, job: Any, wait_until: str | None = "Succeeded", **kwargs: Any) -> None: ...


class _Thin(_Generic):
    pass


class _Extended(_Generic):
    def __init__(self, *, paused: bool = True, **kwargs: Any) -> None: ...


_GOOD = """
### `_Generic`
Templated fields: `job`

| Parameter | Type | Default | Meaning |
|---|---|---|---|
| `job` | dict | required | the job |
| `wait_until` | str | `"Succeeded"` | what to wait for |

### `_Thin`
Parameters: those of [`_Generic`](#_generic).
"""


def _problems(text: str, **classes: type) -> list[str]:
    return reference_problems(parse_reference(text), classes)


def test_checker_accepts_a_complete_reference() -> None:
    assert _problems(_GOOD, _Generic=_Generic, _Thin=_Thin) == []


def test_checker_reports_an_undocumented_parameter() -> None:
    text = _GOOD + "\n### `_Extended`\nParameters: those of [`_Generic`](#_generic).\n"
    problems = _problems(text, _Generic=_Generic, _Thin=_Thin, _Extended=_Extended)
    assert problems == ["_Extended: parameter `paused` is not documented"]


def test_checker_reports_a_parameter_the_code_does_not_take() -> None:
    text = _GOOD.replace("| `wait_until`", "| `wait_for`")
    problems = _problems(text, _Generic=_Generic, _Thin=_Thin)
    assert "_Generic: documents `wait_for`, which its __init__ does not take" in problems
    assert "_Thin: parameter `wait_until` is not documented" in problems


def test_checker_reports_wrong_defaults_classes_and_bases() -> None:
    text = _GOOD.replace('`"Succeeded"`', "`None`").replace("| `job` | dict | required", "| `job` | d | `1`")
    text += "\n### `_Missing`\nTemplated fields: none\n"
    problems = _problems(text, _Generic=_Generic, _Thin=_Extended)
    assert "_Missing: documented, but not exported" in problems
    assert "_Generic: `wait_until` is documented with default `None` but defaults to 'Succeeded'" in problems
    assert "_Generic: `job` is documented with default `1` but is required" in problems
    assert "_Thin: parameter `paused` is not documented" in problems
    assert _problems(_GOOD, _Generic=_Generic) == ["_Thin: documented, but not exported"]
    assert _problems(_GOOD.replace("### `_Thin`", "### `_Other`"), _Generic=_Generic, _Thin=_Thin) == [
        "_Other: documented, but not exported",
        "_Thin: exported, but not documented",
    ]


def test_checker_reports_templated_fields_and_airflow_parameters() -> None:
    text = _GOOD.replace("Templated fields: `job`", "Templated fields: `job`, `wait_until`")
    text += "\n| Airflow parameter | Meaning |\n|---|---|\n| `no_such_thing` | x |\n"
    problems = _problems(text, _Generic=_Generic, _Thin=_Thin)
    assert "_Generic: templated fields documented ['job', 'wait_until'], actual ['job']" in problems
    assert "_Thin: documents Airflow parameter `no_such_thing`, which it does not take" in problems


# -- every doc: links resolve, names exist -----------------------------------------------------------------

DOC_FILES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_MODULE_NAME = re.compile(r"`(airflow_provider_training(?:\.\w+)+)")
_TRAINING_OPTION = re.compile(r"\[training\] (\w+)")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    lines = path.read_text().splitlines()
    return {slug(line.lstrip("#")) for line in lines if _ANY_HEADING.match(line)}


def resolves(dotted: str) -> bool:
    """Whether ``a.b.c`` is a module, or an attribute of the longest importable module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.name)
def test_links_point_to_existing_files_and_headings(path: Path) -> None:
    broken = []
    for match in _LINK.finditer(path.read_text()):
        target = match["target"]
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.name)
def test_named_modules_and_config_options_exist(path: Path) -> None:
    from airflow_provider_training.provider_info import PROVIDER_INFO

    text = path.read_text()
    missing = sorted({name for name in _MODULE_NAME.findall(text) if not resolves(name)})
    options = PROVIDER_INFO["config"]["training"]["options"]
    unknown = sorted({option for option in _TRAINING_OPTION.findall(text) if option not in options})
    assert (missing, unknown) == ([], [])


_TOP_DIRS = "airflow_provider_training|benchmarks|docs|example_dags|scripts|tests"
_REPO_PATH = re.compile(rf"`((?:{_TOP_DIRS})/[\w./-]*)`")


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.name)
def test_named_repository_paths_exist(path: Path) -> None:
    missing = sorted({name for name in _REPO_PATH.findall(path.read_text()) if not (ROOT / name).exists()})
    assert missing == []


def test_every_doc_is_listed_in_the_index() -> None:
    index = (DOCS / "index.md").read_text()
    unlisted = [p.name for p in DOCS.glob("*.md") if p.name != "index.md" and f"({p.name}" not in index]
    assert unlisted == []


# -- the RBAC Role grants exactly what the code uses ------------------------------------------------------

JOB_VERBS = frozenset({"get", "list", "watch", "create", "delete"})  # submit, reattach, watch, cleanup
READ_VERBS = frozenset({"get", "list", "watch"})


def required_rules() -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the hook's calls need, for every registered kind and its children."""
    from airflow_provider_training.kinds import all_kinds

    needed = {("", "pods", verb) for verb in READ_VERBS} | {("", "pods/log", "get"), ("", "events", "list")}
    for kind in all_kinds():
        verbs = JOB_VERBS | ({"patch"} if kind.suspend_patch(True) is not None else set())
        needed |= {(kind.resource.group, kind.resource.plural, verb) for verb in verbs}
        for child in kind.children:
            resource = (child.resource.group, child.resource.plural)
            needed |= {(*resource, verb) for verb in READ_VERBS} if child.needed_for_status else set()
            needed |= {(*resource, "delete")} if child.delete_on_cleanup else set()
    return needed


def test_rbac_role_grants_exactly_what_the_provider_uses() -> None:
    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", (DOCS / "rbac.md").read_text(), flags=re.DOTALL)
    role = next(doc for block in blocks for doc in yaml.safe_load_all(block) if doc.get("kind") == "Role")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == required_rules()


def test_readme_leads_with_the_two_commands() -> None:
    first_block = (ROOT / "README.md").read_text().split("```")[1]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:]]
    assert [command for command in commands if command] == ["make demo", "make test"]


def _first_column(text: str, header: str) -> set[str]:
    """The backticked first cells of the table whose first header cell is ``header``."""
    names: set[str] = set()
    rows = iter(text.splitlines())
    for line in rows:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == header:
            next(rows)  # the |---| separator
            for row in rows:
                if not row.startswith("|"):
                    break
                names.update(_TICKED.findall(row.split("|")[1])[:1])
    return names


def test_connection_extras_and_config_options_are_the_code_s() -> None:
    from dataclasses import fields

    from airflow_provider_training.hooks.connection import KubeSettings
    from airflow_provider_training.links import TEMPLATE_EXTRA
    from airflow_provider_training.provider_info import PROVIDER_INFO

    text = (DOCS / "connection.md").read_text()
    extras = {f.name for f in fields(KubeSettings)} | {TEMPLATE_EXTRA}
    options = {f"[training] {name}" for name in PROVIDER_INFO["config"]["training"]["options"]}
    assert (_first_column(text, "extra"), _first_column(text, "option")) == (extras, options)
