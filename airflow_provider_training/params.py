"""Parameter checks shared by operators, sensors and the trigger (cheap to import at DAG parse time).

Every choice list lives here, and every check raises a ``ValueError`` that names the parameter and says what
was expected, before anything is sent. Label keys and values, annotation keys and namespaces follow
Kubernetes' own rules (``k8s.io/apimachinery/pkg/util/validation``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, get_args

# The states a wait can target: a job is waited for until it succeeded, or until it runs (JobState values,
# spelled out so that DAG parsing does not import the kinds; tests/operators/test_parameters.py checks them).
TargetState = Literal["Succeeded", "Running"]
TARGET_STATES: tuple[TargetState, ...] = get_args(TargetState)
# The operator's wait_until: a target state, or None (return after submitting).
WAIT_UNTIL: tuple[TargetState | None, ...] = (*TARGET_STATES, None)
# What an earlier try's job of this task becomes (submission.py says how each is carried out).
ActionIfExists = Literal["reattach", "recreate", "fail"]
ACTIONS_IF_EXISTS: tuple[ActionIfExists, ...] = get_args(ActionIfExists)
OnFinishAction = Literal["keep", "delete", "delete_succeeded"]
ON_FINISH_ACTIONS: tuple[OnFinishAction, ...] = get_args(OnFinishAction)
# What happens to the job when its task is killed (operator on_kill, or the trigger's while deferred).
OnKillAction = Literal["delete", "keep"]
ON_KILL_ACTIONS: tuple[OnKillAction, ...] = get_args(OnKillAction)
# log_replicas as a word: the replica type that decides the job (``master`` is its old name), or all.
DECIDING = "deciding"
LOG_REPLICAS_ALIASES = {"master": DECIDING}
LOG_REPLICAS_CHOICES = (DECIDING, "all", *LOG_REPLICAS_ALIASES)
# What the builders and decorators give a job unless told otherwise (specs.builders, decorators): a PyTorchJob
# replica that fails is not restarted, so the job fails at once (a task's ``retries`` submit it again); a
# replica that does restart (a ``restart_policy`` of ``OnFailure``, a kind whose operator defaults to it) does
# so until ``runPolicy.backoffLimit`` fails the job, on the kinds whose API has that field.
# ``DEFAULT_MAX_RESTARTS``: the operators' ``max_restarts``, past which a replica that keeps failing fails the
# task whatever the job's own policy.
DEFAULT_RESTART_POLICY = "Never"
DEFAULT_BACKOFF_LIMIT = 3
DEFAULT_MAX_RESTARTS = 3

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
MAX_LABEL = 63
MAX_SUBDOMAIN = 253
MAX_ANNOTATIONS_BYTES = 256 * 1024


C = TypeVar("C")


def check_choice(name: str, value: Any, allowed: Sequence[C]) -> C:
    """``value`` if it is one of ``allowed``, else a ValueError that names the parameter and the choices."""
    if not _is_hashable(value) or value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}; got {value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return value


def check_seconds(name: str, value: Any) -> float:
    """A number of seconds > 0; bools and numeric strings are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a number of seconds > 0; got {value!r}")
    return float(value)


def check_optional_seconds(name: str, value: Any) -> float | None:
    """``None`` (no limit) or a number of seconds > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a number of seconds > 0 or None; got {value!r}")
    return float(value)


def check_text(name: str, value: Any, *, optional: bool = False) -> str | None:
    """A non-empty string (``None`` too when ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        expected = "a non-empty string" + (" or None" if optional else "")
        raise ValueError(f"{name} must be {expected}; got {value!r}")
    return value


def check_namespace(name: str, value: Any) -> str | None:
    """``None`` or a namespace name: a DNS-1123 label (lower-case letters, digits, '-'), at most 63."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_LABEL or not _DNS1123_LABEL.match(value):
        raise ValueError(
            f"{name} must be a Kubernetes namespace name (a DNS-1123 label: at most {MAX_LABEL} lower-case "
            f"letters, digits and '-', starting and ending with a letter or digit); got {value!r}"
        )
    return value


def key_problem(key: Any) -> str | None:
    """Why ``key`` is not a qualified name (``[prefix/]name``) as label and annotation keys must be."""
    if not isinstance(key, str):
        return "must be a string"
    prefix, _, short = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > MAX_SUBDOMAIN or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f"its prefix must be a DNS-1123 subdomain of at most {MAX_SUBDOMAIN} characters"
    if len(short) > MAX_LABEL or not _QUALIFIED_NAME.match(short):
        return (
            f"its name must be at most {MAX_LABEL} characters of letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


def _value_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > MAX_LABEL or not _LABEL_VALUE.match(value):
        return (
            f"must be at most {MAX_LABEL} characters of letters, digits, '-', '_' and '.', starting and "
            "ending with a letter or digit (or empty)"
        )
    return None


def _check_mapping(name: str, value: Any) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping of strings to strings, or None; got {value!r}")
    return value


def check_labels(name: str, value: Any) -> dict[str, str]:
    """Kubernetes labels: qualified-name keys, label values (strings only)."""
    labels = _check_mapping(name, value)
    for key, text in labels.items():
        if problem := key_problem(key):
            raise ValueError(f"{name}: key {key!r} is not a valid label key: {problem}")
        if problem := _value_problem(text):
            raise ValueError(f"{name}: the value of {key!r} ({text!r}) is not a valid label value: {problem}")
    return dict(labels)


def check_annotations(name: str, value: Any) -> dict[str, str]:
    """Kubernetes annotations: qualified-name keys, string values, at most 256 KiB in all."""
    annotations = _check_mapping(name, value)
    for key, text in annotations.items():
        if problem := key_problem(key):
            raise ValueError(f"{name}: key {key!r} is not a valid annotation key: {problem}")
        if not isinstance(text, str):
            raise ValueError(f"{name}: the value of {key!r} must be a string; got {text!r}")
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        raise ValueError(f"{name} must total at most {MAX_ANNOTATIONS_BYTES} bytes; got {size}")
    return dict(annotations)


def check_log_replicas(value: Any) -> str | list[str]:
    """``"deciding"`` (alias ``"master"``), ``"all"``, or a non-empty list of replica type names (kept
    JSON-friendly for the trigger); which types a kind has is :func:`check_log_replicas_for`'s."""
    if isinstance(value, str):
        return LOG_REPLICAS_ALIASES.get(value, check_choice("log_replicas", value, LOG_REPLICAS_CHOICES))
    if not isinstance(value, Sequence) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(
            f"log_replicas must be one of {', '.join(repr(c) for c in LOG_REPLICAS_CHOICES)} or a non-empty "
            f"list of replica type names; got {value!r}"
        )
    return list(value)


def check_max_log_streams(value: Any) -> int | None:
    """``None`` (half the triggerer's open-file limit) or a positive whole number of followed pods."""
    return _optional_count("max_log_streams", value, 1, "a positive whole number of log streams")


def check_max_restarts(value: Any) -> int | None:
    """``None`` (no limit) or a whole number >= 0 of restarts one replica may have."""
    return _optional_count("max_restarts", value, 0, "a whole number >= 0 of restarts of one replica")


def _optional_count(name: str, value: Any, minimum: int, expected: str) -> int | None:
    """``None`` or a whole number >= ``minimum`` (bools and numeric strings refused)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be {expected}, or None; got {value!r}")
    return value


def check_log_replicas_for(value: str | Sequence[str], kind: str, replica_types: Sequence[str]) -> None:
    """A list of replica types must name types ``kind`` has (case-insensitive); kinds with free replica type
    names (no ``replica_types``) take any."""
    if isinstance(value, str) or not replica_types:
        return
    known = {t.lower() for t in replica_types}
    unknown = [v for v in value if v.lower() not in known]
    if unknown:
        raise ValueError(
            f"log_replicas: {kind} has no replica type {', '.join(repr(u) for u in unknown)}; "
            f"its replica types are {', '.join(replica_types)} (case-insensitive)"
        )


def _is_hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
