"""The command line: `serve` a cluster in a subprocess, program a fault into it with `fault`, stop it."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from localkube.__main__ import _controller_names, main
from localkube.controllers import CONTROLLER_NAMES

MODULE = "localkube"


CRDS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "crds"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with serving(tmp_path) as found:
        yield found


@contextlib.contextmanager
def serving(tmp_path: Path, *options: str) -> Iterator[tuple[str, Path]]:
    kubeconfig = tmp_path / "kubeconfig"
    command = [sys.executable, "-m", MODULE, "serve", "--port", "0", "--kubeconfig", str(kubeconfig)]
    with subprocess.Popen(
        [*command, "--runtime", "none", "--no-controllers", *options], stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            yield line, kubeconfig
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()  # never leave the server behind
                raise
    assert code == 0  # the pipe is closed and the process reaped by now


def fault(kubeconfig: Path, *args: str) -> object:
    done = subprocess.run(
        [sys.executable, "-m", MODULE, "fault", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)


def test_serve_and_fault(served: tuple[str, Path]) -> None:
    line, kubeconfig = served
    assert line.startswith("localkube serving http://127.0.0.1:") and line.strip().endswith(str(kubeconfig))
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.retries = 0  # urllib3 would otherwise wait out a 429's Retry-After and retry by itself
    with client.ApiClient(configuration) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"k": "v"}})
        rule = fault(kubeconfig, "throttle", "--retry-after", "4", "--resource", "configmaps")
        assert rule["code"] == 429  # type: ignore[index]
        with pytest.raises(ApiException) as throttled:
            core.read_namespaced_config_map("cm", "default")
        assert throttled.value.status == 429 and throttled.value.headers["Retry-After"] == "4"
        assert core.read_namespaced_config_map("cm", "default").data == {"k": "v"}
        requests = fault(kubeconfig, "requests")
        assert [(r["method"], r["status"]) for r in requests] == [  # type: ignore[union-attr,index]
            ("POST", 201),
            ("GET", 429),
            ("GET", 200),
        ]


def test_serve_loads_crds_from_every_crd_dir(tmp_path: Path) -> None:
    dirs = ("trainer.kubeflow.org-v1alpha1", "jobset.x-k8s.io-v1alpha2")
    with serving(tmp_path, *(a for d in dirs for a in ("--crd-dir", str(CRDS / d)))) as (_, kubeconfig):
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        with client.ApiClient(configuration) as api:
            custom = client.CustomObjectsApi(api)
            trainjobs = custom.list_namespaced_custom_object(
                "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs"
            )
            jobsets = custom.list_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", "default", "jobsets"
            )
            assert (trainjobs["items"], jobsets["items"]) == ([], [])
            with pytest.raises(ApiException) as invalid:  # validated against the JobSet CRD
                custom.create_namespaced_custom_object(
                    "jobset.x-k8s.io",
                    "v1alpha2",
                    "default",
                    "jobsets",
                    {
                        "apiVersion": "jobset.x-k8s.io/v1alpha2",
                        "kind": "JobSet",
                        "metadata": {"name": "x"},
                        "spec": {"replicatedJobs": "not a list"},
                    },
                )
            assert invalid.value.status == 422 and "replicatedJobs" in invalid.value.body


@pytest.mark.parametrize(
    ("text", "names"),
    [("all", list(CONTROLLER_NAMES)), ("none", []), ("", []), ("kubeflow, t9k", ["kubeflow", "t9k"])],
)
def test_controllers_by_name(text: str, names: list[str]) -> None:
    assert _controller_names(text) == names


def test_an_unknown_controller_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["agent", "--kubeconfig", "k", "--controllers", "kubeflow,nope"])
    assert "argument --controllers: unknown controllers nope" in capsys.readouterr().err
