"""What can be shipped to a job's replicas, and the bootstrap each replica runs (a real ``python -c``)."""

from __future__ import annotations

import base64
import functools
import json
import os
import subprocess
import sys

import pytest

from airflow_provider_training.decorators.shipping import (
    PAYLOAD_ENV,
    RESULT_MARKER,
    FunctionNotShippable,
    ReturnValueMissing,
    bootstrap_command,
    function_source,
    payload,
    returned_value,
)

DECORATOR = "task.pytorch_job"
LIMIT = 3


def standalone(a: int, b: list, *, scale: float = 1.0) -> dict:
    """Imports what it needs, reads only builtins and its arguments."""
    import math
    import os

    squares = [x * x for x in b]
    return {"rank": os.environ.get("RANK"), "a": a, "sum": math.fsum(squares) * scale, "n": len(squares)}


def uses_a_module_import(x):
    return json.dumps(x)


def uses_module_constants(x):
    return [LIMIT for _ in range(x)] + [DECORATOR]


def default_reads_the_module(x=LIMIT):
    return x


def context_parameters(ti=None, params=None):
    return params


async def a_coroutine():
    return 1


def recursive(n: int) -> int:
    return 1 if n <= 1 else n * recursive(n - 1)


@functools.wraps(standalone)
def wrapped(*args, **kwargs):
    return standalone(*args, **kwargs)


def decorated(python_callable):
    return python_callable


@decorated
@decorated
def under_decorators(x: int) -> int:
    # a comment stays
    return x + 1


def refusal(function) -> str:
    with pytest.raises(FunctionNotShippable) as info:
        function_source(function, DECORATOR)
    return str(info.value)


def test_a_standalone_function_ships_its_def_alone():
    source = function_source(under_decorators, DECORATOR)
    assert source == "def under_decorators(x: int) -> int:\n    # a comment stays\n    return x + 1\n"
    assert function_source(standalone, DECORATOR).startswith("def standalone(a: int, b: list, *, scale")
    assert function_source(recursive, DECORATOR).startswith("def recursive")  # its own name is defined


def test_a_closure_is_refused_naming_what_it_closes_over():
    factor = 3

    def scaled(x):
        return x * factor

    message = refusal(scaled)
    assert message.startswith("@task.pytorch_job scaled() is a closure over 'factor'")
    assert "pass those values as arguments" in message


def test_module_level_names_are_refused_naming_them():
    message = refusal(uses_a_module_import)
    assert "uses 'json' from the DAG file's module" in message
    assert "modules imported at the DAG file's top level included" in message
    assert "import inside the function" in message
    # In comprehensions too, sorted, and builtins (range) are fine.
    assert "uses 'DECORATOR', 'LIMIT' from the DAG file's module" in refusal(uses_module_constants)
    # A default value is evaluated where the pod defines the function.
    assert "uses 'LIMIT' from the DAG file's module" in refusal(default_reads_the_module)


def test_what_is_not_a_plain_function_is_refused():
    assert "context keys" in refusal(context_parameters) and "'params', 'ti'" in refusal(context_parameters)
    assert "an async def cannot be shipped" in refusal(a_coroutine)
    assert "a lambda cannot be shipped" in refusal(lambda: 1)
    assert "wrapped by another decorator" in refusal(wrapped)
    assert "only a plain function defined with def" in refusal(functools.partial(standalone, 1))
    assert "only a plain function defined with def" in refusal(len)


def test_a_function_without_source_is_refused():
    scope: dict = {}
    exec("def made_up():\n    return 1\n", scope)
    assert "its source cannot be read" in refusal(scope["made_up"])


def test_an_argument_that_is_not_json_is_refused_by_name():
    source = function_source(standalone, DECORATOR)
    with pytest.raises(FunctionNotShippable) as info:
        payload(source, standalone, [1, {2, 3}], {}, rank_env=["RANK"], decorator=DECORATOR)
    assert str(info.value).startswith("@task.pytorch_job standalone(): argument 'b' is not JSON-serializable")
    with pytest.raises(FunctionNotShippable, match="argument 'scale' is not JSON-serializable"):
        payload(source, standalone, [1, []], {"scale": object()}, rank_env=["RANK"], decorator=DECORATOR)


def run_replica(function, args, kwargs, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One replica: the bootstrap as its container would run it (``python`` is this interpreter)."""
    encoded = payload(
        function_source(function, DECORATOR), function, args, kwargs, rank_env=["RANK"], decorator=DECORATOR
    )
    command = bootstrap_command()
    assert command[:2] == ["python", "-c"] and "$(" not in command[2]  # Kubernetes would expand $(...)
    variables = {"PATH": os.environ["PATH"], PAYLOAD_ENV: encoded, **env}
    return subprocess.run([sys.executable, *command[1:]], env=variables, capture_output=True, text=True)


def test_the_payload_round_trips_through_the_bootstrap():
    done = run_replica(standalone, [7, [1, 2, 3]], {"scale": 0.5}, {"RANK": "0"})

    assert done.returncode == 0, done.stderr
    assert returned_value(done.stdout, "rank 0") == {"rank": "0", "a": 7, "sum": 7.0, "n": 3}
    assert done.stdout.count(RESULT_MARKER) == 1


def test_only_rank_0_prints_its_return_value():
    done = run_replica(standalone, [7, []], {}, {"RANK": "1"})

    assert done.returncode == 0, done.stderr
    assert RESULT_MARKER not in done.stdout


def returns_a_set():
    return {1}


def fails(message: str):
    raise ValueError(message)


def test_a_return_value_that_is_not_json_fails_the_replica():
    done = run_replica(returns_a_set, [], {}, {"RANK": "0"})

    assert done.returncode == 1
    assert "the return value of returns_a_set() is not JSON-serializable (TypeError" in done.stderr
    assert RESULT_MARKER not in done.stdout


def test_an_exception_fails_the_replica_with_the_functions_traceback():
    done = run_replica(fails, ["bad shard"], {}, {"RANK": "0"})

    assert done.returncode == 1
    assert 'File "<task.pytorch_job fails>", line 2, in fails' in done.stderr
    assert "    raise ValueError(message)" in done.stderr  # the shipped source's line, via linecache
    assert done.stderr.rstrip().endswith("ValueError: bad shard")


def test_the_payload_is_base64_json_of_source_name_and_arguments():
    encoded = payload("def f(): ...\n", standalone, [1], {"b": []}, rank_env=["A", "B"], decorator=DECORATOR)
    body = json.loads(base64.b64decode(encoded))
    assert body["name"] == "standalone" and body["args"] == [1] and body["kwargs"] == {"b": []}
    assert body["rank_env"] == ["A", "B"] and body["marker"] == RESULT_MARKER and body["version"] == 1


def test_the_last_marked_line_is_the_return_value():
    log = f"epoch 1\n{RESULT_MARKER}1\nno newline before it{RESULT_MARKER}" + '{"a": [1]}\nafter\n'
    assert returned_value(log, "pod p") == {"a": [1]}
    with pytest.raises(ReturnValueMissing, match="pod p ended successfully but its log has no return-value"):
        returned_value("epoch 1\n", "pod p")
