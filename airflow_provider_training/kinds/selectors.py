"""Label selectors matched on the client: the watch hub routes one cached pod list to many waiters by them.

Every term of the server's grammar is read (``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a)``,
``k``, ``!k``); the test cluster (localkube) also reproduces the server's error messages, which the provider
does not need: a term it cannot read is a ValueError naming it.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_TERMS = re.compile(r"(?:[^,(]|\([^)]*\))+")  # commas inside "(...)" do not split
_SET_TERM = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)$")
_EQUALITY_TERM = re.compile(r"^(?P<key>[^!=\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)$")
_EXISTS_TERM = re.compile(r"^(?P<negated>!?)\s*(?P<key>[^!=\s(),]+)$")


@dataclass(frozen=True, slots=True)
class LabelTerm:
    """One term: the label ``key`` has one of ``values`` (``among``), or none of them (not ``among``); no
    ``values`` (``None``) asks only whether the label exists (``among``) or not.

    ``values`` is a sorted tuple without repeats, not a frozenset: a term has one value or a few, and a
    frozenset of one is 216 B where the tuple is 48, for the job-name term every waiting job keeps."""

    key: str
    values: tuple[str, ...] | None
    among: bool

    def holds(self, labels: Mapping[str, str]) -> bool:
        if self.values is None:
            return (self.key in labels) == self.among
        return (self.key in labels and labels[self.key] in self.values) == self.among


def parse_selector(selector: str) -> tuple[LabelTerm, ...]:
    """The terms of ``selector``; raises ValueError naming a term it cannot read."""
    terms: list[LabelTerm] = []
    for raw in _TERMS.findall(selector):
        term = raw.strip()
        if not term:
            continue
        parsed = _parse_term(term)
        if parsed is None:
            raise ValueError(f"label selector {selector!r}: cannot read the term {term!r}")
        terms.append(parsed)
    return tuple(terms)


@functools.lru_cache(maxsize=1024)
def _parse_term(term: str) -> LabelTerm | None:
    """One term (``None``: unreadable). Cached: the watch hub keeps every waiting job's parsed selectors, in
    which all terms but the job's name repeat (the operator's, the replica type's); its strings interned."""
    if found := _SET_TERM.match(term):
        values = tuple(sorted({sys.intern(v.strip()) for v in found["values"].split(",")}))
        return LabelTerm(sys.intern(found["key"]), values, among=found["op"] == "in")
    if found := _EQUALITY_TERM.match(term):
        return LabelTerm(sys.intern(found["key"]), (sys.intern(found["value"]),), among=found["op"] != "!=")
    if found := _EXISTS_TERM.match(term):
        return LabelTerm(sys.intern(found["key"]), None, among=not found["negated"])
    return None


def selects(terms: tuple[LabelTerm, ...], obj: Mapping[str, Any]) -> bool:
    """Whether the object's labels satisfy every term (no terms: every object)."""
    return labels_satisfy(terms, (obj.get("metadata") or {}).get("labels") or {})


def labels_satisfy(terms: tuple[LabelTerm, ...], labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy every term (no terms: any labels)."""
    return all(term.holds(labels) for term in terms)
