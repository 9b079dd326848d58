"""TensorStack T9k DeepSpeedJob, ColossalAIJob and MPIJob (T9k's own MPIJob, `batch.tensorstack.dev/v1beta1`;
tensorstack-t9k.md §3 "Sibling kinds", §4, §6), on the shared T9k reconciliation (`tensorstack.py`).

**DeepSpeedJob**: `spec.worker{replicas, template, restartPolicy}` runs as pods `<job>-worker-<i>` labelled
`tensorstack.dev/owner-name` (main container `worker`, else the first). Worker 0 runs the deepspeed launcher
and decides the outcome. Failed pods restart per `restartPolicy` (default OnFailure; ExitCode as for the
training jobs) within the shared `runPolicy.backoffLimit` (default 3), counted in `backoffCount`;
`runPolicy.cleanUpPolicy` and `activeDeadlineSeconds` as for the training jobs. On failure Running=False,
Failed=True, Completed=True and ReplicaFailure=True all carry reason Failed and the message
`DeepSpeedJob <name> has failed: <pod> failed with exit code N`, as in the docs' real controller output.
With `config.run` (`python`, `module` or `exec`) worker 0 runs `deepspeed --hostfile /t9k/hostfile
[--no_local_rank] [--autotuning run|tune] <otherArgs> <program>`; `config.customCommand` runs under `sh -c`
instead. Debug mode's default command is `/usr/sbin/sshd -D`.

**MPIJob** and **ColossalAIJob**: one launcher pod `<job>-launcher` (no index) and workers `<job>-worker-<i>`,
in either shape:
- up to 2024: `worker{replicas, template, ...}`; MPIJob `worker.cmd`/`extraMPIArgs`, `mca`, `mpiHome`, its
  launcher running in the worker's template; ColossalAIJob `worker.command`/`procPerWorker`/`torchArgs` and
  a launcher container from `launcher{image, workingDir, env, resources}`;
- 2025: `replicaSpecs[]` with `launcher` and `worker` (restartPolicy `{policy, limit}`, default OnFailure
  with limit 0) and `mpiConfig{mca, home, extraArgs, script}` or `torchConfig{procPerWorker, script,
  extraArgs}`; without a launcher spec the launcher runs in the worker's template, and a launcher spec
  without a `launcher` container (`template: {}`) gets a default one made from the worker's main container.
With a script, the launcher runs `[<home>/bin/]mpirun --host <workers> [--mca k v]... <extra args> <script>`
or `colossalai run --nproc_per_node <procPerWorker> --host <workers> <extra args> <script>`. The launcher
decides: its failure fails the job, its exit 0 is Succeeded (which only means the run ended, §6); a worker's
failure only sets ReplicaFailure. No `backoffCount`; `runPolicy.cleanUpWorkers` deletes the worker pods
once the job finished. Debug mode: MPIJob launcher `sleep inf`, workers `/usr/bin/sshd -D`.

Guesses where the docs are silent: the exact launcher command lines (the hostfile behind `/t9k/hostfile`
is not emulated, workers keep their own command instead of running sshd), the Services' ssh port 22, the
MPIJob/ColossalAIJob failure message (the training jobs' form), ColossalAIJob's debug command (`sleep inf`).
Not emulated: elastic DeepSpeedJobs, `disableCustomEnv`, the ssh key setup.
"""

from __future__ import annotations

import copy
import shlex
from typing import Any

from localkube.controllers.tensorstack import (
    Job,
    PerPodRestarts,
    Reconciliation,
    T9kKind,
    TensorStackController,
    main_container,
)

DEEPSPEED_HOSTFILE = "/t9k/hostfile"
SSH_PORT = 22


def deepspeed_specs(spec: dict) -> list[dict]:
    worker = spec.get("worker")
    return [{**worker, "type": "worker"}] if isinstance(worker, dict) else []


def mpi_specs(spec: dict) -> list[dict]:
    if spec.get("replicaSpecs"):
        return _with_launcher(list(spec["replicaSpecs"]))
    worker = spec.get("worker") or {}
    return _with_launcher([{"type": "worker", **_replicas_and_template(worker)}])


def colossalai_specs(spec: dict) -> list[dict]:
    if spec.get("replicaSpecs"):
        return _with_launcher(list(spec["replicaSpecs"]))
    launcher = spec.get("launcher") or {}
    container = {"name": "launcher"} | {
        k: copy.deepcopy(launcher[k]) for k in ("image", "workingDir", "env", "resources") if k in launcher
    }
    return [
        {"type": "launcher", "template": {"spec": {"containers": [container]}}},
        {"type": "worker", **_replicas_and_template(spec.get("worker") or {})},
    ]


def _replicas_and_template(worker: dict) -> dict:
    return {k: worker[k] for k in ("replicas", "template") if k in worker}


def _with_launcher(specs: list[dict]) -> list[dict]:
    """The launcher first: its own spec, else one pod in the worker's template. A launcher spec without a
    `launcher` container (e.g. `template: {}`, as in the docs' example) gets the default one."""
    launcher = next((s for s in specs if s.get("type") == "launcher"), None)
    worker = next((s for s in specs if s.get("type") == "worker"), {})
    if launcher is None:
        launcher = {"type": "launcher", "template": copy.deepcopy(worker.get("template") or {})}
    elif not any(c.get("name") == "launcher" for c in _containers(launcher.get("template") or {})):
        launcher = {**launcher, "template": _default_launcher(launcher.get("template") or {}, worker)}
    return [launcher, *(s for s in specs if s.get("type") != "launcher")]


def _containers(template: dict) -> list[dict]:
    return (template.get("spec") or {}).get("containers") or []


def _default_launcher(template: dict, worker: dict) -> dict:
    """The launcher template with the controller's default `launcher` container put first: UC's MPIJob doc
    says the launcher "should contain a container named launcher, but need not: without one the controller
    sets a default container configuration". Which one is not documented; the guess is the worker main
    container's image, working directory and environment (the image has mpirun), without its resources."""
    template = copy.deepcopy(template)
    main = main_container(MPIJOB, worker.get("template") or {}) or {}
    keep = ("image", "imagePullPolicy", "workingDir", "env", "envFrom")
    default = {"name": "launcher", **{k: copy.deepcopy(main[k]) for k in keep if k in main}}
    spec = template.setdefault("spec", {})
    spec["containers"] = [default, *_containers(template)]
    return template


def _args(value: Any) -> list[str]:
    """A []string field, or a command line written as one string."""
    if not value:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def _launcher_or_worker(types: list[str]) -> str:
    return "launcher" if "launcher" in types else "worker"


DEEPSPEEDJOB = T9kKind(
    "DeepSpeedJob",
    "worker",
    SSH_PORT,
    "OnFailure",
    _launcher_or_worker,
    specs=deepspeed_specs,
    debug_commands={"worker": ["/usr/sbin/sshd", "-D"]},
)
MPIJOB = T9kKind(
    "MPIJob",
    "worker",
    SSH_PORT,
    "OnFailure",
    _launcher_or_worker,
    specs=mpi_specs,
    unindexed=frozenset({"launcher"}),
    debug_commands={"launcher": ["sleep", "inf"], "worker": ["/usr/bin/sshd", "-D"]},
)
COLOSSALAIJOB = T9kKind(
    "ColossalAIJob",
    "worker",
    SSH_PORT,
    "OnFailure",
    _launcher_or_worker,
    specs=colossalai_specs,
    unindexed=frozenset({"launcher"}),
)


def _run(template: dict, kind: T9kKind, command: list[str], container: str | None = None) -> None:
    """Run `command` in the container named `container`, else the template's main one (its args dropped)."""
    named = next((c for c in _containers(template) if container and c.get("name") == container), None)
    main = named or main_container(kind, template)
    if main is not None:
        main["command"] = command
        main.pop("args", None)


class DeepSpeedReconciliation(Reconciliation):
    """One pass over a DeepSpeedJob: worker 0 launches and decides."""

    def launch(self, rtype: str, index: int, template: dict) -> None:
        command = self.launcher_command() if index == 0 else None
        if command is not None:
            _run(template, self.job.kind, command)

    def launcher_command(self) -> list[str] | None:
        config = self.job.spec.get("config") or {}
        if config.get("customCommand"):
            return ["sh", "-c", str(config["customCommand"])]
        run = config.get("run") or {}
        flags = {"python": [], "module": ["--module"], "exec": ["--no_python"]}
        program = next((flags[key] + _args(run[key]) for key in flags if run.get(key)), None)
        if program is None:
            return None
        command = ["deepspeed", "--hostfile", DEEPSPEED_HOSTFILE]
        if config.get("localRank") is False:
            command.append("--no_local_rank")
        if config.get("autotune") in ("run", "tune"):
            command += ["--autotuning", str(config["autotune"])]
        return command + _args(config.get("otherArgs")) + program

    def finish(self, outcome: str, message: str) -> None:
        super().finish(outcome, message)
        if outcome == "Failed":
            self.condition("ReplicaFailure", "True", "Failed", message)


class LauncherReconciliation(PerPodRestarts):
    """One pass over an MPIJob or ColossalAIJob: the launcher decides; `cleanUpWorkers`."""

    def launch(self, rtype: str, index: int, template: dict) -> None:
        command = self.launcher_command() if rtype == "launcher" else None
        if command is not None:
            _run(template, self.job.kind, command, "launcher")

    def launcher_command(self) -> list[str] | None:
        raise NotImplementedError

    @property
    def old_worker(self) -> dict:
        """The up-to-2024 `spec.worker` block (empty in the 2025 `replicaSpecs` shape)."""
        spec = self.job.spec
        return {} if spec.get("replicaSpecs") else spec.get("worker") or {}

    @property
    def workers(self) -> str:
        return ",".join(self.job.host("worker", i) for i in range(self.job.replicas("worker")))

    def removed_when_finished(self, name: str, pod: dict) -> bool:
        return bool(self.job.run_policy.get("cleanUpWorkers")) and self.job.replica_of(name)[0] == "worker"


class MPIReconciliation(LauncherReconciliation):
    def launcher_command(self) -> list[str] | None:
        spec, worker = self.job.spec, self.old_worker
        config = spec.get("mpiConfig") or {}
        script = _args(config.get("script") or worker.get("cmd"))
        if not script or "worker" not in self.job.specs:
            return None
        home = config.get("home") or spec.get("mpiHome")
        mca = config.get("mca") or spec.get("mca") or {}
        command = [f"{str(home).rstrip('/')}/bin/mpirun" if home else "mpirun", "--host", self.workers]
        for key, value in mca.items():
            command += ["--mca", str(key), str(value)]
        return command + _args(config.get("extraArgs") or worker.get("extraMPIArgs")) + script


class ColossalAIReconciliation(LauncherReconciliation):
    def launcher_command(self) -> list[str] | None:
        config, worker = self.job.spec.get("torchConfig") or {}, self.old_worker
        script = _args(config.get("script") or worker.get("command"))
        if not script or "worker" not in self.job.specs:
            return None
        processes = config.get("procPerWorker") or worker.get("procPerWorker") or 1
        command = ["colossalai", "run", "--nproc_per_node", str(processes), "--host", self.workers]
        return command + _args(config.get("extraArgs") or worker.get("torchArgs")) + script


PASSES: dict[str, type[Reconciliation]] = {
    DEEPSPEEDJOB.kind: DeepSpeedReconciliation,
    MPIJOB.kind: MPIReconciliation,
    COLOSSALAIJOB.kind: ColossalAIReconciliation,
}


class SiblingController(TensorStackController):
    """Reconciles T9k's DeepSpeedJob, MPIJob and ColossalAIJob."""

    def __init__(self) -> None:
        super().__init__((DEEPSPEEDJOB, MPIJOB, COLOSSALAIJOB))

    def make_pass(self, kind: T9kKind, raw: dict) -> Reconciliation:
        return PASSES[kind.kind](self, Job(kind, raw))
