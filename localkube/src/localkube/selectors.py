"""Label and field selectors with the grammar and the error messages of the real API server."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from localkube.resources import EVENTS, NAMESPACES, PODS, SECRETS, ResourceType

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})\s*$")
_EXISTS_RE = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")


class SelectorError(ValueError):
    """A selector that does not parse; the server answers 400 BadRequest with this message."""


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector: `key op values`."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin" match objects without the label


def _split_terms(selector: str) -> list[str]:
    """Split on commas that are not inside a `(...)` value set."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [term for term in terms if term.strip()]


def parse_label_selector(selector: str | None) -> list[Requirement]:
    """Parse `a=b,c!=d,e in (x,y),f notin (z),g,!h`; raises SelectorError."""
    requirements: list[Requirement] = []
    for term in _split_terms(selector or ""):
        if match := _SET_RE.match(term):
            values = [v.strip() for v in match["values"].split(",")]
            if any(not _VALUE_RE.match(v) for v in values):
                raise SelectorError(f"unable to parse requirement: invalid label value in {term.strip()!r}")
            requirements.append(Requirement(match["key"], match["op"], frozenset(values)))
        elif match := _EQ_RE.match(term):
            op = "!=" if match["op"] == "!=" else "="
            requirements.append(Requirement(match["key"], op, frozenset({match["value"]})))
        elif match := _EXISTS_RE.match(term):
            requirements.append(Requirement(match["key"], "!exists" if match["neg"] else "exists"))
        else:
            raise SelectorError(
                f"unable to parse requirement: found '{term.strip()}', expected: selector term"
            )
    return requirements


def labels_match(requirements: list[Requirement], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(req.matches(labels) for req in requirements)


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    negate: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negate


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value of a dotted field path; missing fields read as the empty string."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


_COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_EXTRA_FIELDS: dict[str, frozenset[str]] = {
    PODS.key: frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    SECRETS.key: frozenset({"type"}),
    NAMESPACES.key: frozenset({"status.phase"}),
    EVENTS.key: frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
}
_FIELD_ALIASES = {"source": "source.component"}


def parse_field_selector(selector: str | None, rt: ResourceType) -> list[FieldRequirement]:
    """Parse `metadata.name=x,status.phase!=Running` for the fields the real server supports on rt."""
    supported = _COMMON_FIELDS | _EXTRA_FIELDS.get(rt.key, frozenset())
    requirements: list[FieldRequirement] = []
    for term in _split_terms(selector or ""):
        for op in ("!=", "==", "="):
            if op in term:
                field, value = (part.strip() for part in term.split(op, 1))
                break
        else:
            raise SelectorError(f"invalid selector: '{selector}'; can't understand '{term.strip()}'")
        if field not in supported:
            raise SelectorError(f"field label not supported: {field}")
        requirements.append(FieldRequirement(_FIELD_ALIASES.get(field, field), op == "!=", value))
    return requirements


def fields_match(requirements: list[FieldRequirement], obj: Mapping[str, Any]) -> bool:
    return all(req.matches(obj) for req in requirements)


def compile_selectors(
    rt: ResourceType, label_selector: str | None, field_selector: str | None
) -> Callable[[Mapping[str, Any]], bool]:
    """One predicate for both selectors; raises SelectorError for either."""
    labels = parse_label_selector(label_selector)
    fields = parse_field_selector(field_selector, rt)
    return lambda obj: labels_match(labels, obj) and fields_match(fields, obj)
