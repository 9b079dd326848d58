"""Shipping a training function written in the DAG file to every replica of its job.

What goes to the pods is the function's *source* (its ``def`` alone: decorators dropped, dedented), its name
and the call's arguments as JSON, base64-encoded in one environment variable (:data:`PAYLOAD_ENV`; base64
keeps Kubernetes' ``$(VAR)`` expansion out of the source). Each replica runs :data:`BOOTSTRAP` with
``python -c``: it defines the function afresh, calls it with the arguments under the framework's env (set by
the training operator: ``RANK``, ``WORLD_SIZE``, ``PET_NODE_RANK``, ...), and the deciding replica (rank 0)
prints the JSON of the return value as one line starting with :data:`RESULT_MARKER`, which the Airflow task
reads from that pod's log (:mod:`~airflow_provider_training.completion` reads it, and re-exported here:
:data:`RESULT_MARKER`, :func:`returned_value`, :class:`ReturnValueMissing`).

A function that cannot live on its own in a pod is refused where it is decorated (:func:`function_source`):
a closure, one that reads module-level names of the DAG file (imports included: they do not exist in the
pod), a lambda, an ``async def``, a wrapped function, one whose parameters are Airflow context keys.
Arguments that do not serialize as JSON are refused when the task runs, after templates and XComs are
resolved, before anything is submitted (:func:`payload`). The module imports the standard library and the
return value's reader only (and, in :func:`function_source`, Airflow's context keys): DAG files import it at
parse time.
"""

from __future__ import annotations

import ast
import base64
import builtins
import dis
import inspect
import json
import textwrap
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from airflow_provider_training.completion import RESULT_MARKER, ReturnValueMissing, returned_value

__all__ = [
    "BOOTSTRAP",
    "PAYLOAD_ENV",
    "RESULT_MARKER",
    "FunctionNotShippable",
    "ReturnValueMissing",
    "bootstrap_command",
    "function_source",
    "payload",
    "returned_value",
]

PAYLOAD_ENV = "AIRFLOW_TRAINING_FUNCTION"
PAYLOAD_VERSION = 1

# Runs in every replica (``python -c``); standard library only, and no ``$(`` (Kubernetes would expand it).
# The function is compiled with postponed annotations, so annotations naming DAG-file objects do not run.
# linecache holds the source so that the traceback of an exception shows the function's lines.
BOOTSTRAP = """\
import __future__, base64, json, linecache, os, sys, traceback
p = json.loads(base64.b64decode(os.environ["AIRFLOW_TRAINING_FUNCTION"]))
if p["version"] != 1:
    sys.exit("this bootstrap runs payload version 1, got " + str(p["version"]))
linecache.cache[p["filename"]] = (len(p["source"]), None, p["source"].splitlines(True), p["filename"])
code = compile(p["source"], p["filename"], "exec", __future__.annotations.compiler_flag, True)
scope = {"__name__": "__training_function__"}
exec(code, scope)
try:
    value = scope[p["name"]](*p["args"], **p["kwargs"])
except Exception:
    traceback.print_exc()  # unlike the interpreter's own report, shows the source lines (from linecache)
    sys.exit(1)
rank = next((os.environ[k] for k in p["rank_env"] if k in os.environ), "0")
if rank == "0":
    try:
        line = json.dumps(value)
    except (TypeError, ValueError) as err:
        sys.exit(
            "the return value of " + p["name"] + "() is not JSON-serializable (" + type(err).__name__
            + ": " + str(err) + "): return plain data (dict, list, str, int, float, bool, None)"
        )
    sys.stdout.flush()
    print(p["marker"] + line, flush=True)
"""


class FunctionNotShippable(TypeError):
    """The decorated function, or its arguments, cannot be sent to the job's pods (nothing was submitted)."""


def function_source(function: Callable[..., Any], decorator: str) -> str:
    """The function's ``def`` as text, decorators dropped and dedented, once it is known to run alone in a
    pod; else :class:`FunctionNotShippable`, naming what is in the way."""
    name = getattr(function, "__name__", repr(function))
    where = f"@{decorator} {name}()"
    if getattr(function, "__wrapped__", None) is not None:
        raise FunctionNotShippable(f"{where}: a function wrapped by another decorator cannot be shipped")
    if not isinstance(function, types.FunctionType):
        raise FunctionNotShippable(
            f"{where}: only a plain function defined with def can be shipped (got {type(function).__name__})"
        )
    if name == "<lambda>":
        raise FunctionNotShippable(f"{where}: a lambda cannot be shipped; write a def function")
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        raise FunctionNotShippable(f"{where}: an async def cannot be shipped; write a plain def function")
    if function.__code__.co_freevars:
        raise FunctionNotShippable(
            f"{where} is a closure over {_names(function.__code__.co_freevars)} of the function that defines "
            "it: only a function defined at the top level of the DAG file can be shipped; pass those values "
            "as arguments"
        )
    from airflow.sdk.definitions.context import KNOWN_CONTEXT_KEYS  # loaded with airflow.sdk already

    if context := sorted(KNOWN_CONTEXT_KEYS & set(inspect.signature(function).parameters)):
        raise FunctionNotShippable(
            f"{where}: parameter(s) {_names(context)} are Airflow context keys, but the function runs in the "
            "job's pods, where there is no task context; pass the values it needs as arguments"
        )
    try:
        raw = inspect.getsource(function)
    except (OSError, TypeError) as err:
        raise FunctionNotShippable(
            f"{where}: its source cannot be read ({err}); define it in a file"
        ) from err
    node, source = _definition(raw, name, where)
    used = _global_names(function.__code__) | _names_in_defaults(node)
    unknown = sorted(n for n in used if n != name and not hasattr(builtins, n))
    if unknown:
        raise FunctionNotShippable(
            f"{where} uses {_names(unknown)} from the DAG file's module, which the job's pods do not have "
            "(modules imported at the DAG file's top level included): import inside the function, and "
            "pass values as arguments"
        )
    return source


def payload(
    source: str,
    function: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    rank_env: Sequence[str],
    decorator: str,
) -> str:
    """The base64 text of :data:`PAYLOAD_ENV`: source, name, arguments and the env variables whose first
    present one is the replica's rank (the deciding replica has rank ``0``). Raises
    :class:`FunctionNotShippable` naming an argument that is not JSON-serializable."""
    name = function.__name__
    bound = inspect.signature(function).bind_partial(*args, **kwargs).arguments
    for argument, value in bound.items():
        try:
            json.dumps(value, allow_nan=True)
        except (TypeError, ValueError) as err:
            raise FunctionNotShippable(
                f"@{decorator} {name}(): argument {argument!r} is not JSON-serializable ({err}): the "
                "arguments go to the job's pods as JSON; pass plain data (dict, list, str, int, float, "
                "bool, None), e.g. a path instead of an open file"
            ) from None
    body = {
        "version": PAYLOAD_VERSION,
        "name": name,
        "filename": f"<{decorator} {name}>",
        "source": source,
        "args": list(args),
        "kwargs": dict(kwargs),
        "rank_env": list(rank_env),
        "marker": RESULT_MARKER,
    }
    return base64.b64encode(json.dumps(body).encode()).decode("ascii")


def bootstrap_command() -> list[str]:
    """The replica's container command: ``python -c`` :data:`BOOTSTRAP`."""
    return ["python", "-c", BOOTSTRAP]


def _definition(raw: str, name: str, where: str) -> tuple[ast.FunctionDef, str]:
    """The function's node and its source from the ``def`` line on (its decorators are left behind)."""
    text = textwrap.dedent(raw)
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise FunctionNotShippable(f"{where}: its source does not parse on its own ({err})") from err
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef) or node.name != name:
        raise FunctionNotShippable(f"{where}: its source is not a def statement of its own")
    lines = text.splitlines(keepends=True)
    return node, "".join(lines[node.lineno - 1 :])


def _global_names(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the code nested in it (comprehensions, inner functions) read."""
    names = {
        str(ins.argval)
        for ins in dis.get_instructions(code)
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "DELETE_GLOBAL")
    }
    stored = {str(ins.argval) for ins in dis.get_instructions(code) if ins.opname == "STORE_GLOBAL"}
    for nested in _nested_code(code):
        names |= _global_names(nested)
    return names - stored


def _nested_code(code: types.CodeType) -> Iterator[types.CodeType]:
    return (const for const in code.co_consts if isinstance(const, types.CodeType))


def _names_in_defaults(node: ast.FunctionDef) -> set[str]:
    """Names the parameters' default values read: the pod evaluates them when it defines the function."""
    defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
    return {n.id for d in defaults for n in ast.walk(d) if isinstance(n, ast.Name)}


def _names(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)
