"""``load_job``: a dict, YAML text, YAML file or pydantic model becomes a validated manifest dict, or a
:class:`SpecError` naming every bad field, before anything is sent.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from airflow_provider_training.kinds import JobKind, get_kind
from airflow_provider_training.kinds.registry import import_family_modules, known_kinds_text
from airflow_provider_training.specs.common import JobModel, name_errors
from airflow_provider_training.specs.errors import FieldErrors, SpecError

SPEC_MODULES: tuple[str, ...] = (
    "airflow_provider_training.specs.kubeflow",
    "airflow_provider_training.specs.mxnet_legacy",
    "airflow_provider_training.specs.paddle_edl",
    "airflow_provider_training.specs.tensorstack",
    "airflow_provider_training.specs.trainer",
    "airflow_provider_training.specs.mpi_operator",
)
"""Modules exporting ``MODELS: tuple[type[JobModel], ...]``; adding a family's specs is one line here."""

JobSource = Mapping[str, Any] | str | os.PathLike[str] | BaseModel


class UntypedJob(JobModel):
    """Stand-in for a kind that has no spec model: checks the metadata, passes ``spec`` through."""

    model_config = ConfigDict(strict=False)
    spec: dict[str, Any]

    def errors(self) -> FieldErrors:
        return name_errors(self.metadata.name, [])


@cache
def _models() -> dict[tuple[str, str], type[JobModel]]:
    return {
        (model.API_VERSION, model.KIND): model
        for module in import_family_modules(SPEC_MODULES)
        for model in module.MODELS
    }


def model_for(kind: JobKind) -> type[JobModel]:
    """The spec model of ``kind``; an :class:`UntypedJob` for a kind that has none."""
    return _models().get((kind.api_version, kind.kind)) or _untyped_model(kind.api_version, kind.kind)


def has_field(kind: JobKind, path: str) -> bool:
    """Whether ``kind``'s API has the field at the dotted JSON ``path`` (``spec.runPolicy.backoffLimit``), as
    its spec model says (a kind without a model has none)."""
    loc = tuple(path.split("."))
    return loc[-1] in _allowed_keys(model_for(kind), loc)


@cache
def _untyped_model(api_version: str, kind: str) -> type[JobModel]:
    return type(f"Untyped{kind}", (UntypedJob,), {"API_VERSION": api_version, "KIND": kind})


def load_job(job: JobSource, *, kind: JobKind | str | None = None) -> dict[str, Any]:
    """The validated manifest (apiVersion, kind, metadata, spec) of ``job``. Raises :class:`SpecError`."""
    return parse_job(job, kind=kind).manifest()


def parse_job(job: JobSource, *, kind: JobKind | str | None = None) -> JobModel:
    """Like :func:`load_job`, but the validated model (e.g. for :meth:`JobModel.name_limit`)."""
    data = read_manifest(job)
    job_kind = resolve_kind(data, kind)
    data.update(apiVersion=job_kind.api_version, kind=job_kind.kind)
    model_cls = model_for(job_kind)
    try:
        model = model_cls.model_validate(data)
    except ValidationError as exc:
        raise SpecError(pydantic_errors(exc, model_cls), kind=job_kind.kind) from None
    errors = model.errors()
    if errors:
        raise SpecError(errors, kind=job_kind.kind)
    return model


def job_name_limit(job: JobSource, *, kind: JobKind | str | None = None) -> int:
    """How long the job's name may be so that every replica pod name stays within 63 characters."""
    return parse_job(job, kind=kind).name_limit()


def read_manifest(job: JobSource) -> dict[str, Any]:
    """A fresh dict from any accepted source; YAML is parsed safely and syntax errors name line and column."""
    if isinstance(job, BaseModel):
        return job.model_dump(by_alias=True, exclude_none=True)
    if isinstance(job, Mapping):
        return copy.deepcopy(dict(job))
    if isinstance(job, os.PathLike) or (isinstance(job, str) and _looks_like_path(job)):
        path = Path(job)
        try:
            text = path.read_text()
        except OSError as exc:
            raise SpecError([(str(path), f"cannot read the job file: {exc.strerror or exc}")]) from None
        return _parse_yaml(text, str(path))
    if isinstance(job, str):
        return _parse_yaml(job, "")
    expected = "a dict, YAML text, a YAML file path or a pydantic model"
    raise SpecError([("", f"the job must be {expected} (got {type(job).__name__})")])


def _looks_like_path(text: str) -> bool:
    one_line = "\n" not in text.strip()
    return one_line and (text.strip().endswith((".yaml", ".yml", ".json")) or os.path.isfile(text))


def _parse_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        where = f"{source} {where}".strip() if source else where
        problem = " ".join(part for part in (exc.problem, f"({exc.context})" if exc.context else "") if part)
        raise SpecError([(where, f"broken YAML: {problem}")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([(source, f"broken YAML: {exc}")]) from None
    if not isinstance(data, dict):
        got = "nothing" if data is None else type(data).__name__
        expected = "a mapping with apiVersion, kind, metadata and spec"
        raise SpecError([(source, f"the job must be {expected} (got {got})")])
    return data


def resolve_kind(data: Mapping[str, Any], kind: JobKind | str | None) -> JobKind:
    """The kind from the manifest's apiVersion + kind and/or the ``kind`` argument, which must agree."""
    declared, declared_version = data.get("kind"), data.get("apiVersion")
    requested = kind.kind if isinstance(kind, JobKind) else kind
    if requested and declared and declared != requested:
        raise SpecError([("kind", f"the manifest says {declared!r} but {requested!r} was asked for")])
    name = requested or declared
    if not name:
        raise SpecError(
            [("kind", f"required (in the manifest or as kind=); known kinds: {known_kinds_text()}")]
        )
    if isinstance(kind, JobKind):
        if declared_version and declared_version != kind.api_version:
            expected = f"{kind.api_version} for the {kind.kind} asked for"
            raise SpecError(
                [("apiVersion", f"must be {expected} (got {declared_version!r})")], kind=kind.kind
            )
        return kind
    try:
        get_kind(str(name))
    except ValueError as exc:
        raise SpecError([("kind", str(exc))]) from None
    try:
        return get_kind(str(name), declared_version)
    except ValueError as exc:
        raise SpecError([("apiVersion", str(exc))], kind=str(name)) from None


def pydantic_errors(exc: ValidationError, model: type[BaseModel]) -> FieldErrors:
    """Pydantic's errors as (JSON field path, expectation), in words that name the allowed values."""
    errors: FieldErrors = []
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
        kind, got = error["type"], _short(error.get("input"))
        if kind == "missing":
            text = "required"
        elif kind == "extra_forbidden":
            allowed = _allowed_keys(model, loc)
            text = f"unknown field; allowed: {', '.join(allowed)}" if allowed else "unknown field"
        elif kind == "literal_error":
            text = f"must be {error['ctx']['expected']} (got {got})"
        elif kind == "value_error":
            text = str(error["ctx"]["error"])
        else:
            text = f"{error['msg'][0].lower()}{error['msg'][1:]} (got {got})"
        errors.append((path, text))
    return errors


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unwrap(annotation: Any) -> Any:
    """``X | None`` and ``Annotated[X, ...]`` -> ``X``."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin in (Union, UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return _unwrap(members[0]) if len(members) == 1 else annotation
    return annotation


def _allowed_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The JSON keys the model allows at the mapping that holds ``loc[-1]``."""
    current: Any = model
    for part in loc[:-1]:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
            current = field.annotation if field else None
        elif get_origin(current) in (dict, list):
            current = get_args(current)[-1]
        else:
            return []
    current = _unwrap(current)
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return []
    return sorted(field.alias or name for name, field in current.model_fields.items() if not field.exclude)
