"""CustomResourceDefinition schemas: validate and prune custom objects as the kube-apiserver does.

A :class:`SchemaRegistry` holds every served version of every ``apiextensions.k8s.io/v1``
CustomResourceDefinition found below a directory. :meth:`SchemaRegistry.validate_and_prune` treats an
incoming object the way the apiserver treats a request body for a structural schema:

1. unknown fields are dropped silently, unless a parent sets ``x-kubernetes-preserve-unknown-fields``;
   ``apiVersion``, ``kind`` and ``metadata`` are always kept at the top level and in embedded resources;
2. a ``null`` in a property that is not ``nullable`` is dropped;
3. ``default`` values are filled into objects that lack them (on every write, as the apiserver does when
   it decodes a body);
4. the result is validated, collecting every error with its field path and a message worded like the
   apiserver's (``Invalid value``, ``Required value``, ``Unsupported value``, ``Too long``, ``Too many``).

Not checked, on purpose: ``x-kubernetes-validations`` (CEL rules), ``x-kubernetes-list-type`` /
``x-kubernetes-list-map-keys`` / ``x-kubernetes-map-type`` (uniqueness of set and map lists), ``allOf`` /
``oneOf`` / ``not``, and string formats other than ``date-time``. ``anyOf`` only appears in structural
schemas next to ``x-kubernetes-int-or-string``, which is handled directly. Top-level ``metadata`` is the
store's business (name rules), not the schema's.

Why a walker of our own instead of ``jsonschema``: pruning and defaulting need a walk over the schema
anyway, the apiserver's error paths and messages differ from jsonschema's, and jsonschema knows none of
the ``x-kubernetes-*`` extensions. A single pass that prunes, defaults and validates is short and fast.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import yaml

log = logging.getLogger(__name__)

_CRD_API_VERSION = "apiextensions.k8s.io/v1"
_OBJECT_KEYS = frozenset({"apiVersion", "kind", "metadata"})
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_NO_DEFAULT = object()


@dataclass(frozen=True)
class FieldError:
    """One schema violation, worded as the apiserver words a ``field.Error``."""

    field: str
    """Path of the offending field, e.g. ``spec.pytorchReplicaSpecs.Master.replicas`` or ``spec.x[0].y``."""
    message: str
    """The error body, e.g. ``Required value`` or ``Invalid value: "string": ... must be of type integer``."""
    value: Any = None
    """The offending value (``None`` for a missing field)."""
    reason: str = "FieldValueInvalid"
    """The ``StatusCause`` reason: FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, ..."""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class SchemaViolation(Exception):
    """An object failed its CRD schema: the apiserver answers 422 Invalid."""

    def __init__(self, kind: str, name: str, errors: list[FieldError], group: str = "") -> None:
        self.kind = kind
        self.name = name
        self.errors = errors
        self.group = group
        qualified = f"{kind}.{group}" if group else kind
        listed = "; ".join(str(e) for e in errors) if len(errors) == 1 else f"[{', '.join(map(str, errors))}]"
        super().__init__(f'{qualified} "{name}" is invalid: {listed}')

    def causes(self) -> list[dict[str, str]]:
        """``details.causes`` of the 422 ``Status`` body."""
        return [{"reason": e.reason, "message": e.message, "field": e.field} for e in self.errors]


@dataclass(frozen=True)
class CrdInfo:
    """One served version of a CustomResourceDefinition (field names as in ``ResourceType``)."""

    group: str
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool = True
    subresources: frozenset[str] = frozenset()
    """Of ``{"status", "scale"}``: the subresources this version enables."""


# ---------------------------------------------------------------------------------------------- compiling


def _compile_pattern(pattern: str) -> re.Pattern[str] | None:
    """CRD patterns are Go RE2; the few RE2 forms Python's re lacks are skipped rather than fail the CRD."""
    try:
        return re.compile(pattern)
    except re.error:
        log.warning("ignoring schema pattern %r: not a Python regular expression", pattern)
        return None


class _Schema:
    """One node of an ``openAPIV3Schema``, with what validation needs already looked up."""

    __slots__ = (
        "additional",
        "default",
        "embedded",
        "enum",
        "exclusive_max",
        "exclusive_min",
        "format",
        "int_or_string",
        "items",
        "max_items",
        "max_length",
        "max_properties",
        "maximum",
        "min_items",
        "min_length",
        "min_properties",
        "minimum",
        "multiple_of",
        "nullable",
        "pattern",
        "preserve_unknown",
        "properties",
        "required",
        "type",
    )

    def __init__(self, raw: dict[str, Any]) -> None:
        self.type: str | None = raw.get("type")
        self.int_or_string = bool(raw.get("x-kubernetes-int-or-string"))
        self.preserve_unknown = bool(raw.get("x-kubernetes-preserve-unknown-fields"))
        self.embedded = bool(raw.get("x-kubernetes-embedded-resource"))
        self.nullable = bool(raw.get("nullable"))
        self.properties = {k: _Schema(v) for k, v in (raw.get("properties") or {}).items()}
        additional = raw.get("additionalProperties")
        # additionalProperties: true keeps any value; a schema validates every map value.
        self.additional: _Schema | bool = (
            _Schema(additional) if isinstance(additional, dict) else bool(additional)
        )
        self.items = _Schema(raw["items"]) if isinstance(raw.get("items"), dict) else None
        self.required: tuple[str, ...] = tuple(raw.get("required") or ())
        self.enum: list[Any] | None = raw.get("enum")
        self.default = raw.get("default", _NO_DEFAULT)
        self.format: str | None = raw.get("format")
        self.pattern = _compile_pattern(raw["pattern"]) if "pattern" in raw else None
        self.minimum = raw.get("minimum")
        self.maximum = raw.get("maximum")
        self.exclusive_min = bool(raw.get("exclusiveMinimum"))
        self.exclusive_max = bool(raw.get("exclusiveMaximum"))
        self.multiple_of = raw.get("multipleOf")
        self.min_length = raw.get("minLength")
        self.max_length = raw.get("maxLength")
        self.min_items = raw.get("minItems")
        self.max_items = raw.get("maxItems")
        self.min_properties = raw.get("minProperties")
        self.max_properties = raw.get("maxProperties")


# ------------------------------------------------------------------------------------------ error wording


def _json_type(value: Any) -> str:
    """The JSON type name the apiserver reports for a value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _show(value: Any) -> str:
    """A bad value as ``field.Error`` prints it: strings quoted, numbers bare, null as ``"null"``."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, f"Invalid value: {_show(value)}: {path} in body {detail}", value)


def _type_error(path: str, value: Any, expected: str) -> FieldError:
    got = _json_type(value)
    return FieldError(
        path, f"Invalid value: {_quote(got)}: {path} in body must be of type {expected}: {_quote(got)}", value
    )


def _enum_text(value: Any) -> str:
    """An enum member as Go's ``fmt.Sprint`` prints it, for ``supported values``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


# --------------------------------------------------------------------------------------------- walking


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer()
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _in_enum(value: Any, enum: list[Any]) -> bool:
    # bool is an int in Python, not in JSON: True must not match 1.
    return any(value == e and isinstance(value, bool) == isinstance(e, bool) for e in enum)


def _valid_datetime(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return "T" in text.upper() or " " in text


class _Collected(list[FieldError]):
    """The violations of one walk, and the fields it pruned as undeclared (``unknown``)."""

    def __init__(self) -> None:
        super().__init__()
        self.unknown: list[str] = []


def _walk(s: _Schema, value: Any, path: str, errors: list[FieldError], top: bool = False) -> Any:
    """Return a pruned, defaulted copy of ``value``; append what is wrong with it to ``errors``."""
    if value is None:
        if not s.nullable and (s.type is not None or s.int_or_string):
            errors.append(_type_error(path, value, "integer,string" if s.int_or_string else s.type or ""))
        return None
    if s.int_or_string:
        if isinstance(value, str) or _is_int(value):
            value = int(value) if isinstance(value, float) else value
            _check_scalar(s, value, path, errors)
        else:
            errors.append(_type_error(path, value, "integer,string"))
        return value
    kind = s.type
    if kind is None:  # typeless: only legal with x-kubernetes-preserve-unknown-fields; anything goes.
        return copy.deepcopy(value)
    if kind == "object":
        if not isinstance(value, dict):
            errors.append(_type_error(path, value, kind))
            return value
        return _walk_object(s, value, path, errors, top)
    if kind == "array":
        if not isinstance(value, list):
            errors.append(_type_error(path, value, kind))
            return value
        if s.min_items is not None and len(value) < s.min_items:
            errors.append(_invalid(path, value, f"should have at least {s.min_items} items"))
        if s.max_items is not None and len(value) > s.max_items:
            errors.append(
                FieldError(
                    path,
                    f"Too many: {len(value)}: must have at most {s.max_items} items",
                    value,
                    "FieldValueTooMany",
                )
            )
        if s.items is None:
            return copy.deepcopy(value)
        return [_walk(s.items, item, f"{path}[{i}]", errors) for i, item in enumerate(value)]
    if kind == "string":
        ok = isinstance(value, str)
    elif kind == "integer":
        ok = _is_int(value)
        value = int(value) if ok and isinstance(value, float) else value
    elif kind == "number":
        ok = _is_number(value)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    else:
        ok = True  # unknown type names are refused when a CRD is created; nothing to check here.
    if not ok:
        errors.append(_type_error(path, value, kind))
        return value
    _check_scalar(s, value, path, errors)
    return value


def _walk_object(s: _Schema, value: dict[str, Any], path: str, errors: list[FieldError], top: bool) -> dict:
    out: dict[str, Any] = {}
    keep_object_keys = top or s.embedded
    for key, item in value.items():
        prop = s.properties.get(key)
        if keep_object_keys and key in _OBJECT_KEYS:
            out[key] = copy.deepcopy(item)
        elif prop is not None:
            if item is None and not prop.nullable:
                continue  # a non-nullable null is pruned; a default may fill it below
            out[key] = _walk(prop, item, _child(path, key), errors)
        elif isinstance(s.additional, _Schema):
            out[key] = _walk(s.additional, item, _child(path, key), errors)
        elif s.additional or s.preserve_unknown:
            out[key] = copy.deepcopy(item)
        elif isinstance(errors, _Collected):  # an unknown field (a null too), pruned silently
            errors.unknown.append(_child(path, key))
    for key, prop in s.properties.items():
        if key not in out and prop.default is not _NO_DEFAULT:
            out[key] = _walk(prop, copy.deepcopy(prop.default), _child(path, key), errors)
    for key in s.required:
        if key not in out:
            errors.append(FieldError(_child(path, key), "Required value", None, "FieldValueRequired"))
    if s.min_properties is not None and len(out) < s.min_properties:
        errors.append(_invalid(path, out, f"should have at least {s.min_properties} properties"))
    if s.max_properties is not None and len(out) > s.max_properties:
        errors.append(_invalid(path, out, f"should have at most {s.max_properties} properties"))
    return out


def _check_scalar(s: _Schema, value: Any, path: str, errors: list[FieldError]) -> None:
    """enum, format and the numeric and string limits of a string, integer, number or boolean."""
    if s.enum is not None and not _in_enum(value, s.enum):
        supported = ", ".join(_quote(_enum_text(e)) for e in s.enum)
        errors.append(
            FieldError(
                path,
                f"Unsupported value: {_show(value)}: supported values: {supported}",
                value,
                "FieldValueNotSupported",
            )
        )
    if isinstance(value, str):
        _check_string(s, value, path, errors)
    elif _is_number(value):
        _check_number(s, value, path, errors)


def _check_string(s: _Schema, value: str, path: str, errors: list[FieldError]) -> None:
    if s.max_length is not None and len(value) > s.max_length:
        errors.append(
            FieldError(
                path, f"Too long: may not be more than {s.max_length} bytes", value, "FieldValueTooLong"
            )
        )
    if s.min_length is not None and len(value) < s.min_length:
        errors.append(_invalid(path, value, f"should be at least {s.min_length} chars long"))
    if s.pattern is not None and not s.pattern.search(value):
        errors.append(_invalid(path, value, f"should match '{s.pattern.pattern}'"))
    if s.format == "date-time" and not _valid_datetime(value):
        errors.append(_invalid(path, value, f"must be of type date-time: {_quote(value)}"))


def _check_number(s: _Schema, value: float, path: str, errors: list[FieldError]) -> None:
    bounds = {"int32": _INT32, "int64": _INT64}.get(s.format or "")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        errors.append(_invalid(path, value, f"must be of type {s.format}: {_quote(str(value))}"))
    if s.minimum is not None and (value <= s.minimum if s.exclusive_min else value < s.minimum):
        relation = "greater than" if s.exclusive_min else "greater than or equal to"
        errors.append(_invalid(path, value, f"should be {relation} {s.minimum}"))
    if s.maximum is not None and (value >= s.maximum if s.exclusive_max else value > s.maximum):
        relation = "less than" if s.exclusive_max else "less than or equal to"
        errors.append(_invalid(path, value, f"should be {relation} {s.maximum}"))
    if s.multiple_of and not math.isclose(math.remainder(value, s.multiple_of), 0.0, abs_tol=1e-9):
        errors.append(_invalid(path, value, f"should be a multiple of {s.multiple_of}"))


# -------------------------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class _Version:
    info: CrdInfo
    schema: dict[str, Any]
    source: Path


def _crd_documents(path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for file in sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()):
        with file.open(encoding="utf-8") as fh:
            for doc in yaml.load_all(fh, Loader=loader):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    yield file, doc


def _served_versions(file: Path, crd: dict[str, Any]) -> Iterator[_Version]:
    if crd.get("apiVersion") != _CRD_API_VERSION:
        log.warning(
            "%s: skipping %s CustomResourceDefinition (only %s is read)",
            file,
            crd.get("apiVersion"),
            _CRD_API_VERSION,
        )
        return
    spec = crd["spec"]
    names = spec["names"]
    for version in spec.get("versions") or ():
        if not version.get("served", True):
            continue
        info = CrdInfo(
            group=spec["group"],
            version=version["name"],
            plural=names["plural"],
            kind=names["kind"],
            singular=names.get("singular") or names["kind"].lower(),
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            subresources=frozenset(version.get("subresources") or {}) & {"status", "scale"},
        )
        # A version without a schema keeps everything, like x-kubernetes-preserve-unknown-fields at the root.
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
        }
        yield _Version(info, schema, file)


Key = tuple[str, str, str]


class SchemaRegistry:
    """Served CRD versions by ``(group, version, plural)``, each validating objects of its own version."""

    _loaded: ClassVar[dict[tuple[Any, ...], SchemaRegistry]] = {}
    _loaded_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, versions: Iterable[_Version] = ()) -> None:
        self._versions: dict[Key, _Version] = {}
        for version in versions:
            info = version.info
            key = (info.group, info.version, info.plural)
            if key in self._versions:
                # As `kubectl apply` of a second CRD with the same name: the later definition wins.
                log.warning("%s replaces %s for %s/%s %s", version.source, self._versions[key].source, *key)
            self._versions[key] = version
        self._compiled: dict[Key, _Schema] = {}
        self._compile_lock = threading.Lock()

    @classmethod
    def from_dir(cls, path: str | Path) -> SchemaRegistry:
        """Every served version of every CRD in the ``*.yaml`` / ``*.yml`` files below ``path``.

        Registries are shared per directory while its files are unchanged, so that many local clusters
        in one test session parse the (large) CRD files once.
        """
        root = Path(path)
        if not root.is_dir():
            raise FileNotFoundError(f"CRD directory not found: {root}")
        signature = (
            root.resolve(),
            *((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(root.rglob("*"))),
        )
        with cls._loaded_lock:
            registry = cls._loaded.get(signature)
            if registry is None:
                registry = cls(v for file, crd in _crd_documents(root) for v in _served_versions(file, crd))
                cls._loaded[signature] = registry
        return registry

    @classmethod
    def from_dirs(cls, paths: Iterable[str | Path]) -> SchemaRegistry:
        """The CRDs of several directories (each loaded as by :meth:`from_dir`; a later one's wins)."""
        registries = [cls.from_dir(path) for path in paths]
        if len(registries) == 1:
            return registries[0]
        key = ("dirs", *(id(registry) for registry in registries))  # the parts are cached, so their ids hold
        with cls._loaded_lock:
            combined = cls._loaded.get(key)
            if combined is None:
                combined = cls(v for registry in registries for v in registry._versions.values())
                cls._loaded[key] = combined
        return combined

    def crds(self) -> list[CrdInfo]:
        """Every served version, sorted by group, plural and version."""
        return sorted((v.info for v in self._versions.values()), key=lambda i: (i.group, i.plural, i.version))

    def has(self, group: str, version: str, plural: str) -> bool:
        return (group, version, plural) in self._versions

    def unknown_fields(self, group: str, version: str, plural: str, obj: dict[str, Any]) -> list[str]:
        """The paths of ``obj``'s fields that the schema does not declare (``spec.bogus``), in the order they
        appear: what pruning drops silently, and what a ``fieldValidation=Strict`` request is refused for (a
        null one too; a declared field's null is dropped without a word)."""
        collected = _Collected()
        _walk(self._schema((group, version, plural)), obj, "", collected, top=True)
        return collected.unknown

    def validate_and_prune(
        self, group: str, version: str, plural: str, obj: dict[str, Any]
    ) -> dict[str, Any]:
        """Return ``obj`` pruned of unknown fields and defaulted; raise :class:`SchemaViolation` if invalid.

        ``obj`` is not modified. Raises ``KeyError`` for a resource this registry does not know.
        """
        key = (group, version, plural)
        if key not in self._versions:
            raise KeyError(f"no CustomResourceDefinition serves {plural}.{group}/{version}")
        errors: list[FieldError] = []
        result = _walk(self._schema(key), obj, "", errors, top=True)
        if errors:
            info = self._versions[key].info
            metadata = obj.get("metadata") if isinstance(obj, dict) else None
            name = (
                (metadata.get("name") or metadata.get("generateName") or "")
                if isinstance(metadata, dict)
                else ""
            )
            raise SchemaViolation(info.kind, name, errors, group)
        return result

    def _schema(self, key: Key) -> _Schema:
        compiled = self._compiled.get(key)
        if compiled is None:
            with self._compile_lock:
                compiled = self._compiled.get(key)
                if compiled is None:
                    compiled = self._compiled[key] = _Schema(self._versions[key].schema)
        return compiled
