"""TrainJobs through the provider's operators under Kubeflow Trainer's real controller manager (v2.3.0) and
the real JobSet controller (v0.12.0) (``$REALTRAINER_BIN``, built by scripts/realkube/build-trainer.sh) on a
real kube-apiserver and kube-controller-manager (the batch Job controller); the agent is only the kubelet
(scripted runtime). Both controllers run as their manifests' ServiceAccounts and RBAC with their admission
webhooks; upstream's torch-distributed and deepspeed-distributed ClusterTrainingRuntimes are installed
unchanged, and the provider runs as the ServiceAccount of docs/rbac.md with its runtime ClusterRole.

Every TrainJob and JobSet status and every pod version is watched; steps (a gate, suspend, resume, a delete)
are taken when the watched state shows the controllers got there. With ``REALTRAINER_RECORD=1`` each
scenario's record (deferrable mode) is written to tests/fixtures/real-trainer/.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from localkube.realcluster import RealCluster
from localkube.realtrainer import write_crd_dir

from airflow_provider_training.operators import (
    TrainingJobResumeOperator,
    TrainingJobSuspendOperator,
    TrainJobOperator,
)
from airflow_provider_training.operators.trainer import TrainingRuntimeNotFound
from airflow_provider_training.results import TrainingJobError
from tests.operators.harness import MODES, in_thread, make_context, run_operator
from tests.real.conftest import as_documented_account, launch
from tests.real.families_real import open_gate
from tests.real.real_operator import Api
from tests.real.test_kinds import logged
from tests.real.trainer_real import (
    JOBSETS,
    TRAINJOBS,
    Seen,
    bind_documented_with_runtimes,
    condition,
    has,
    install_runtimes,
    new_gate,
    pod_record,
    pods_running,
    recording,
    running_after_resume,
    save,
    scripted,
    stable_names,
    suspended_without_pods,
    without_ids,
)

pytestmark = pytest.mark.timeout(240)
RUNTIME = "torch-distributed"


@pytest.fixture(scope="session")
def trainer_bin() -> Path:
    if not os.environ.get("REALTRAINER_BIN"):
        pytest.fail(
            "needs REALTRAINER_BIN, the Trainer's and JobSet's directory: run it with `make test-real`"
        )
    return Path(os.environ["REALTRAINER_BIN"])


@pytest.fixture(scope="session")
def trainer_cluster(tmp_path_factory: pytest.TempPathFactory, trainer_bin: Path) -> Iterator[RealCluster]:
    """A real cluster running the real Trainer and JobSet controllers, with upstream's runtimes, for the
    session."""
    crd_dir = write_crd_dir(trainer_bin, tmp_path_factory.mktemp("trainer-crds"))
    with launch(tmp_path_factory, "realtrainer", crd_dir=crd_dir, trainer=trainer_bin) as cluster:
        install_runtimes(cluster, trainer_bin)
        yield cluster


@pytest.fixture(scope="session")
def trainer_kubeconfig(trainer_cluster: RealCluster) -> Path:
    return bind_documented_with_runtimes(trainer_cluster)


@pytest.fixture
def namespace(trainer_cluster: RealCluster, trainer_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``kubernetes_default`` as the documented ServiceAccount; returns the documented Role's namespace."""
    return as_documented_account(trainer_kubeconfig, monkeypatch)


def operator(
    name: str, script: dict[str, Any], nodes: int = 1, launcher: dict[str, Any] | None = None, **options: Any
) -> TrainJobOperator:
    trainer = {"image": "pytorch/pytorch", "command": ["torchrun", "train.py"], "numNodes": nodes}
    by_job = {"launcher": launcher} if launcher is not None else {}
    return TrainJobOperator(
        task_id="train",
        job_name=name,
        runtime=options.pop("runtime", RUNTIME),
        trainer=trainer,
        spec={"runtimePatches": scripted(script, **by_job)},
        check_interval=0.2,
        **options,
    )


Step = tuple[Callable[[Seen], bool], Callable[[], None]]


class Output:
    """The test's captured output so far, read from the steps' thread (kept, for the test's assertions)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys, self.parts = capsys, []  # type: list[str]

    @property
    def text(self) -> str:
        self.parts.append(self.capsys.readouterr().out)
        return "".join(self.parts)

    def shows(self, text: str) -> Callable[[Seen], bool]:
        """A step's check: the provider printed ``text`` (it follows the pod's log, so it will see the pod
        end)."""

        def printed(_: Seen) -> bool:
            return text in self.text

        printed.__name__ = f"printed {text!r}"
        return printed


def run_scenario(
    cluster: RealCluster,
    namespace: str,
    op: TrainJobOperator,
    steps: list[Step],
    mode: str,
    record: str | None = None,
) -> tuple[Any, Seen]:
    """Run ``op`` in ``mode`` while watching its TrainJob, JobSet and pods, taking each step once the
    watched state satisfies its check; returns the outcome (the result or the TrainingJobError) and what was
    seen. The TrainJob is deleted afterwards; with REALTRAINER_RECORD set, the deferrable run is saved as
    ``record``."""
    name = str(op.job_name)
    with recording(Api.of(cluster), namespace, name) as seen:
        stepper, stepped = in_thread(lambda: [(seen.wait_until(when), act()) for when, act in steps])
        try:
            outcome: Any = run_operator(op, make_context(), mode)
        except TrainingJobError as err:
            outcome = err
        stepper.join(120)
        assert "error" not in stepped, stepped
        assert not stepper.is_alive(), "the operator returned before the scenario's steps were taken"
        job = cluster.get(f"{TRAINJOBS}/namespaces/{namespace}/trainjobs/{name}")
        jobset = cluster.get(f"{JOBSETS}/namespaces/{namespace}/jobsets/{name}")
    if record and mode == "deferrable" and os.environ.get("REALTRAINER_RECORD"):
        data = {
            "trainjob": {"spec": job["spec"], "statuses": seen.trainjob},
            "jobset": {"spec": without_ids(jobset["spec"]), "statuses": seen.jobset},
            "pod_phases": seen.pods,
            "pods": {n: pod_record(p) for n, p in sorted(seen.pod_objects.items())},
        }
        save(record, stable_names(data, seen.pod_objects))
    cluster.request("DELETE", f"{TRAINJOBS}/namespaces/{namespace}/trainjobs/{name}")
    return outcome, seen


def final(seen: Seen, which: str = "trainjob") -> dict[str, Any]:
    return getattr(seen, which)[-1]


@pytest.mark.parametrize("mode", MODES)
def test_success(trainer_cluster, namespace, mode, capsys):
    gate = new_gate(f"ok-{mode}")
    script = {"default": {"duration": 0.2, "logs": ["epoch 1"], "gate": gate, "after_gate": ["saved model"]}}
    op = operator(f"tj-ok-{mode}", script)

    result, seen = run_scenario(
        trainer_cluster,
        namespace,
        op,
        [(pods_running, lambda: open_gate(trainer_cluster, gate, namespace))],
        mode,
        record="success",
    )

    assert not isinstance(result, Exception), result
    assert result["state"] == "Succeeded"
    complete = condition(final(seen), "Complete")
    assert complete and (complete["status"], complete["reason"]) == ("True", "AllJobsCompleted")
    assert condition(final(seen, "jobset"), "Completed")["status"] == "True"
    out = capsys.readouterr().out.splitlines()
    assert any("[node-0]" in line and "saved model" in line for line in out), out


@pytest.mark.parametrize("mode", MODES)
def test_failure_names_node_0_and_its_exit_code(trainer_cluster, namespace, mode, capsys):
    gate = new_gate(f"fail-{mode}")
    failing = {
        "duration": 0.2,
        "exit_code": 3,
        "logs": ["loading shards"],
        "gate": gate,
        "after_gate": ["RuntimeError: shard 7 is corrupt"],
    }
    # The real controllers' own failure is what this test reads: max_restarts (default 3) would end the wait
    # before the batch Job's backoffLimit of 6 is used up (tests/operators/test_crash_loop.py covers it).
    op = operator(f"tj-fail-{mode}", {"default": failing}, max_restarts=None)
    output = Output(capsys)

    # The runtime's pods restart in place (restartPolicy OnFailure) until the batch Job's backoffLimit (6),
    # then the Job controller deletes the pod: the gate opens once the provider follows node-0's log.
    error, seen = run_scenario(
        trainer_cluster,
        namespace,
        op,
        [(output.shows("[node-0] loading shards"), lambda: open_gate(trainer_cluster, gate, namespace))],
        mode,
        record="failure",
    )

    assert isinstance(error, TrainingJobError), error
    assert error.status == "failed"
    failed = condition(final(seen), "Failed")
    assert failed and (failed["status"], failed["reason"]) == ("True", "FailedJobs")
    message = str(error)
    print(message)
    assert "node-0 (pod " in message and "container node): exit code 3" in message, message
    assert "RuntimeError: shard 7 is corrupt" in message, message
    assert "jobset failed due to one or more job failures" in message, message


@pytest.mark.parametrize("mode", MODES)
def test_deleted_while_waiting(trainer_cluster, namespace, mode):
    name = f"tj-deleted-{mode}"
    op = operator(name, {"default": {"duration": None}})
    path = f"{TRAINJOBS}/namespaces/{namespace}/trainjobs/{name}"

    def delete() -> None:
        trainer_cluster.request("DELETE", path)

    with recording(Api.of(trainer_cluster), namespace, name) as seen:
        stepper, stepped = in_thread(lambda: (seen.wait_until(pods_running), delete()))
        with pytest.raises(TrainingJobError) as failure:
            run_operator(op, make_context(), mode)
        stepper.join(60)
        assert "error" not in stepped, stepped
        seen.wait_until(lambda s: "trainjob" in s.deleted and "jobset" in s.deleted and not s.live_pods())

    assert failure.value.status == "deleted"


def test_on_kill_in_sync_mode_deletes_the_trainjob_and_its_children(trainer_cluster, namespace):
    name = "tj-kill"
    op = operator(name, {"default": {"duration": None}})
    with recording(Api.of(trainer_cluster), namespace, name) as seen:
        worker, outcome = in_thread(lambda: run_operator(op, make_context(), "sync"))
        seen.wait_until(pods_running)

        op.on_kill()
        worker.join(timeout=90)
        seen.wait_until(lambda s: "trainjob" in s.deleted and "jobset" in s.deleted and not s.live_pods())

    assert isinstance(outcome.get("error"), TrainingJobError), outcome
    assert outcome["error"].status == "deleted"
    jobs = trainer_cluster.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    assert not [j for j in jobs if j["metadata"]["name"].startswith(f"{name}-")]
    # Deleted in the background: under a foreground delete the Trainer applied the JobSet again each time
    # the garbage collector deleted it, and new pods came for tens of seconds.
    assert len(seen.pods) == 1, seen.pods


def test_on_kill_of_a_deferred_task_deletes_the_trainjob_and_its_children(trainer_cluster, namespace):
    name = "tj-kill-deferred"
    op = operator(name, {"default": {"duration": None}}, deferrable=True)
    with recording(Api.of(trainer_cluster), namespace, name) as seen:
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(make_context())
        seen.wait_until(pods_running)

        asyncio.run(deferred.value.trigger.on_kill())
        seen.wait_until(lambda s: "trainjob" in s.deleted and "jobset" in s.deleted and not s.live_pods())

    assert len(seen.pods) == 1, seen.pods  # no JobSet applied again (see the sync test)


def test_suspend_and_resume_while_waiting(trainer_cluster, namespace, capsys):
    name = "tj-suspend"
    gate = new_gate(name)
    script = {"default": {"duration": 0.2, "gate": gate, "after_gate": ["saved model"]}}
    op = operator(name, script)

    def control(operator_class: type) -> Callable[[], None]:
        task = operator_class(task_id="ctl", job_name=name, kind="TrainJob", namespace=namespace)
        return lambda: task.execute(make_context())

    steps: list[Step] = [
        (pods_running, control(TrainingJobSuspendOperator)),
        (suspended_without_pods, control(TrainingJobResumeOperator)),
        (running_after_resume, lambda: open_gate(trainer_cluster, gate, namespace)),
    ]
    result, seen = run_scenario(trainer_cluster, namespace, op, steps, "deferrable", record="suspend")

    assert not isinstance(result, Exception), result
    assert result["state"] == "Succeeded"
    suspended = has(seen.trainjob, "Suspended")
    assert suspended is not None
    resumed = has(seen.trainjob[suspended:], "Suspended", "False")
    assert resumed is not None
    assert condition(seen.trainjob[suspended + resumed], "Suspended")["reason"] == "Resumed"
    assert len(seen.pods) == 2 and all(p[-1] == "Succeeded" or "Deleted" in p for p in seen.pods.values())
    out = capsys.readouterr().out
    assert out.index("is suspended (") < out.index("was resumed")


def test_a_missing_runtime_is_refused_before_submitting(trainer_cluster, namespace):
    op = operator("tj-no-runtime", {"default": {}}, runtime="no-such-runtime")

    with pytest.raises(TrainingRuntimeNotFound, match="ClusterTrainingRuntime 'no-such-runtime'"):
        op.execute(make_context())

    path = f"{TRAINJOBS}/namespaces/{namespace}/trainjobs/tj-no-runtime"
    assert trainer_cluster.get_or_none(path) is None
    # What the Trainer itself does with such a TrainJob: its validating webhook refuses it.
    body = {**op.job, "metadata": {"name": "tj-no-runtime", "namespace": namespace}}
    with pytest.raises(urllib.error.HTTPError) as refused:
        trainer_cluster.request("POST", f"{TRAINJOBS}/namespaces/{namespace}/trainjobs", body)
    message = json.loads(refused.value.read())["message"]
    assert refused.value.code == 403, message
    assert 'webhook "validator.trainjob.trainer.kubeflow.org" denied the request' in message
    assert "specified clusterTrainingRuntime must be created before the TrainJob is created" in message


def test_num_nodes_override_makes_indexed_pods_with_the_torch_env(trainer_cluster, namespace, capsys):
    name = "tj-nodes"
    gate = new_gate(name)
    script = {"default": {"duration": 0.2, "logs": ["rank up"], "gate": gate, "after_gate": ["saved model"]}}
    op = operator(name, script, nodes=2, log_replicas="all")

    def both_running(seen: Seen) -> bool:
        return sum(phases[-1] == "Running" for phases in seen.pods.values()) == 2

    result, seen = run_scenario(
        trainer_cluster,
        namespace,
        op,
        [(both_running, lambda: open_gate(trainer_cluster, gate, namespace))],
        "deferrable",
        record="num-nodes",
    )

    assert not isinstance(result, Exception), result
    assert result["state"] == "Succeeded"
    pods = {
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]: p
        for p in seen.pod_objects.values()
    }
    assert sorted(pods) == ["0", "1"]
    for index, pod in pods.items():
        assert pod["spec"]["hostname"] == f"{name}-node-0-{index}"
        assert pod["spec"]["subdomain"] == name
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["PET_NNODES"]["value"] == "2"
        assert env["PET_MASTER_ADDR"]["value"] == f"{name}-node-0-0.{name}"
        rank = env["PET_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
        assert rank == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        print(index, json.dumps(pod["spec"]["containers"][0]["env"]))
    out = capsys.readouterr().out
    assert "[node-0] saved model" in out and "[node-1] saved model" in out, out


def launcher_running(seen: Seen) -> bool:
    return any(phases[-1] == "Running" and "-launcher-" in name for name, phases in seen.pods.items())


@pytest.mark.parametrize("mode", MODES)
def test_deepspeed_runtime_launcher_decides(trainer_cluster, namespace, mode, capsys):
    """Upstream's deepspeed-distributed (MPI, OpenMPI, ``runLauncherAsNode``): numNodes 2 is one node pod
    (sshd) and the launcher (the trainer's command, node 0); the launcher starts once the node is ready and
    its success completes the JobSet (successPolicy: the launcher) while the node still runs. The launcher's
    log is in the task log, also when the operator chose what to stream before the JobSet reported a
    launcher (it then follows the master-role pods: the launcher's and node 0's)."""
    name = f"tj-deepspeed-{mode}"
    gate = new_gate(name)
    launcher = {
        "default": {"duration": 0.2, "logs": ["mpirun -np 2"], "gate": gate, "after_gate": ["saved model"]}
    }
    op = operator(
        name, {"default": {"duration": None}}, nodes=2, launcher=launcher, runtime="deepspeed-distributed"
    )

    result, seen = run_scenario(
        trainer_cluster,
        namespace,
        op,
        [(launcher_running, lambda: open_gate(trainer_cluster, gate, namespace))],
        mode,
        record="deepspeed-success",
    )

    assert not isinstance(result, Exception), result
    assert result["state"] == "Succeeded"
    assert result["replicas"]["launcher"]["succeeded"] == 1 and result["replicas"]["node"]["succeeded"] == 0
    pods = {
        p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]: p for p in seen.pod_objects.values()
    }
    assert sorted(pods) == ["launcher", "node"]
    out = capsys.readouterr().out
    assert any(line.startswith("[launcher") and "saved model" in line for line in logged(out)), out[-4000:]

    assert pods["launcher"]["spec"]["containers"][0]["command"] == ["torchrun", "train.py"]
    assert pods["node"]["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd"]
    env = {e["name"]: e.get("value") for e in pods["launcher"]["spec"]["containers"][0]["env"]}
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
