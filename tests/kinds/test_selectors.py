"""The provider's client-side reading of the label selectors the kinds build."""

from __future__ import annotations

import pytest

from airflow_provider_training.kinds import registry
from airflow_provider_training.kinds.base import JobKind
from airflow_provider_training.kinds.selectors import LabelTerm, parse_selector, selects


def pod(**labels: str) -> dict:
    return {"metadata": {"name": "p", "labels": labels}}


def test_each_term_form() -> None:
    assert parse_selector("a=1, b==2,c!=3,d,!e,f in (x, y),g notin (z)") == (
        LabelTerm("a", ("1",), True),
        LabelTerm("b", ("2",), True),
        LabelTerm("c", ("3",), False),
        LabelTerm("d", None, True),
        LabelTerm("e", None, False),
        LabelTerm("f", ("x", "y"), True),
        LabelTerm("g", ("z",), False),
    )
    sets = parse_selector("f in (x,y),g notin (z)")
    assert selects(sets, pod(f="y"))
    assert selects(sets, pod(f="x", g="w"))
    assert not selects(sets, pod(f="x", g="z"))
    assert not selects(sets, pod(g="w"))  # f must be among x, y
    terms = parse_selector("a=1,c!=3,d,!e")
    assert selects(terms, pod(a="1", d=""))
    assert selects(terms, pod(a="1", c="4", d="x"))
    assert not selects(terms, pod(a="1", c="3", d="x"))  # c!=3
    assert not selects(terms, pod(a="2", d="x"))  # a=1
    assert not selects(terms, pod(a="1"))  # d must exist
    assert not selects(terms, pod(a="1", d="x", e="y"))  # e must not
    assert selects((), {"metadata": {}})  # the empty selector selects everything


def test_a_term_repeated_across_selectors_is_one_object() -> None:
    """The watch hub keeps every waiting job's parsed selectors: the terms they share (the operator's, the
    replica type's) are parsed once and shared, with their strings; only the job's own term is new."""
    first = parse_selector("job-name=a,operator=pytorch")
    second = parse_selector("job-name=b, operator=pytorch")
    assert first[1] is second[1] and first[0] != second[0]
    assert first[0].key is second[0].key  # interned
    assert not hasattr(first[0], "__dict__")  # a slots record


def test_a_term_it_cannot_read_is_named() -> None:
    with pytest.raises(ValueError, match=r"cannot read the term 'b in x'"):
        parse_selector("a=1,b in x")


@pytest.mark.parametrize(
    "kind", registry.all_kinds(), ids=lambda k: k.resource.key + "-" + k.resource.version
)
def test_every_kind_selector_parses_and_selects_its_own_labels(kind: JobKind) -> None:
    """Every pod and master selector a kind builds is one this module reads, and selects a pod that
    carries exactly the labels its equality terms name."""
    for selector in (
        kind.pod_selector("job-1"),
        kind.master_selector("job-1"),
        *kind.extra_pod_selectors("job-1"),
    ):
        terms = parse_selector(selector)
        assert terms, selector
        labels = {t.key: min(t.values or {""}) for t in terms if t.among}
        assert selects(terms, pod(**labels)), selector
