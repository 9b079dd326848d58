"""The scripted runtime's timeline format: what each pod of a job does, deterministically.

A script maps *selectors* to *steps*. It is set on a job (or a pod template) with the annotation
`localkube.dev/script` (JSON or YAML), or registered from Python with :func:`register_script`::

    {"default":  {"duration": 0.2, "logs": ["step 1 loss 0.9"], "exit_code": 0},
     "Worker":   {"exit_code": 1},
     "Worker-1": {"attempts": [{"exit_code": 137}, {"exit_code": 0}]},
     "Master":   {"pending": "Unschedulable", "pending_for": 0.5}}

Selectors, from least to most specific (later ones override earlier ones field by field): `default`, the
replica type (`Worker`, case-insensitive), `<type>-<index>` (`Worker-1`), the pod name. See
docs/localkube-runtimes.md for every field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

ANNOTATION = "localkube.dev/script"
PENDING_REASONS = ("Unschedulable", "ImagePullBackOff")

_FIELDS = {
    "duration": (int, float, type(None)),
    "logs": (list,),
    "exit_code": (int,),
    "reason": (str,),
    "message": (str,),
    "pending": (str, type(None)),
    "pending_for": (int, float, type(None)),
    "start_delay": (int, float),
    "backoff": (int, float),
    "attempts": (list,),
    "containers": (dict,),
    "gate": (str, type(None)),
    "after_gate": (list,),
}
DEFAULT_STEP: dict[str, Any] = {
    "duration": 0.2,
    "logs": ["{pod}/{container}: training step 1", "{pod}/{container}: done"],
    "exit_code": 0,
    "reason": None,
    "message": None,
    "pending": None,
    "pending_for": None,
    "start_delay": 0.02,
    "backoff": 0.05,
    "gate": None,
    "after_gate": [],
}

_registry: dict[tuple[str, str], dict] = {}


class ScriptError(ValueError):
    """A script that does not parse or names an unknown field."""


@dataclass(frozen=True)
class Step:
    """What one run of one container does."""

    duration: float | None  # None: run until the pod is deleted
    logs: tuple[str, ...]
    exit_code: int
    reason: str | None
    message: str | None
    pending: str | None  # hold the pod: "Unschedulable" | "ImagePullBackOff"
    pending_for: float | None  # None: hold until the pod is deleted
    start_delay: float  # time in ContainerCreating
    backoff: float  # first CrashLoopBackOff delay (doubles per restart)
    gate: str | None = None  # after its logs, the container does not exit until this gate is opened
    after_gate: tuple[str, ...] = ()  # lines written once the gate opens, before the container exits

    def render_logs(self, values: Mapping[str, str], lines: Sequence[str] | None = None) -> list[str]:
        """The log lines (`lines`, else `logs`) with `{pod}`, `{container}`, `{namespace}`, `{type}`,
        `{index}`, `{attempt}` set."""
        rendered = []
        for line in self.logs if lines is None else lines:
            for key, value in values.items():
                line = line.replace("{" + key + "}", value)
            rendered.append(line)
        return rendered


def register_script(job: str, script: Mapping[str, Any] | str, namespace: str = "default") -> None:
    """Script the pods owned by `job` (or the pod named `job`) from Python; the annotation wins if set."""
    _registry[(namespace, job)] = parse_script(script)


def unregister_script(job: str, namespace: str = "default") -> None:
    _registry.pop((namespace, job), None)


def registered_script(namespace: str, *names: str) -> dict | None:
    return next((_registry[(namespace, n)] for n in names if (namespace, n) in _registry), None)


def parse_script(source: Mapping[str, Any] | str) -> dict:
    """A script from a mapping or a JSON/YAML string, validated."""
    if isinstance(source, str):
        try:
            loaded = yaml.safe_load(source)
        except yaml.YAMLError as exc:
            raise ScriptError(f"{ANNOTATION} is neither JSON nor YAML: {exc}") from exc
    else:
        loaded = json.loads(json.dumps(source))
    if not isinstance(loaded, dict):
        raise ScriptError(f"{ANNOTATION} must be a mapping of selectors to steps")
    for selector, step in loaded.items():
        _check_step(str(selector), step)
    return loaded


def _check_step(where: str, step: Any) -> None:
    if not isinstance(step, dict):
        raise ScriptError(f"{where}: a step must be a mapping")
    for key, value in step.items():
        if key not in _FIELDS:
            raise ScriptError(f"{where}.{key}: unknown field (known: {', '.join(sorted(_FIELDS))})")
        if not isinstance(value, _FIELDS[key]) or isinstance(value, bool):
            raise ScriptError(f"{where}.{key}: invalid value {value!r}")
    if step.get("pending") not in (None, *PENDING_REASONS):
        raise ScriptError(f"{where}.pending: must be one of {', '.join(PENDING_REASONS)}")
    for index, attempt in enumerate(step.get("attempts", [])):
        _check_step(f"{where}.attempts[{index}]", attempt)
        if "attempts" in attempt:
            raise ScriptError(f"{where}.attempts[{index}]: attempts do not nest")
    for name, override in step.get("containers", {}).items():
        _check_step(f"{where}.containers.{name}", override)


def resolve_step(
    script: Mapping[str, Any] | None,
    *,
    pod: str,
    container: str,
    attempt: int,
    replica_type: str | None = None,
    replica_index: str | None = None,
) -> Step:
    """The step for one run: merge the matching selectors, then the container override, then the attempt."""
    merged: dict[str, Any] = dict(DEFAULT_STEP)
    lowered = {str(k).lower(): v for k, v in (script or {}).items()}
    selectors = ["default"]
    if replica_type:
        selectors.append(replica_type.lower())
        if replica_index is not None:
            selectors.append(f"{replica_type.lower()}-{replica_index}")
    selectors.append(pod.lower())
    for selector in selectors:
        merged.update(lowered.get(selector) or {})
    merged.update((merged.pop("containers", None) or {}).get(container) or {})
    attempts = merged.pop("attempts", None) or []
    if attempts:
        merged.update(attempts[min(attempt, len(attempts) - 1)])
    return Step(
        duration=None if merged["duration"] is None else float(merged["duration"]),
        logs=tuple(str(line) for line in merged["logs"]),
        exit_code=int(merged["exit_code"]),
        reason=merged["reason"],
        message=merged["message"],
        pending=merged["pending"],
        pending_for=None if merged["pending_for"] is None else float(merged["pending_for"]),
        start_delay=float(merged["start_delay"]),
        backoff=float(merged["backoff"]),
        gate=merged["gate"],
        after_gate=tuple(str(line) for line in merged["after_gate"]),
    )
