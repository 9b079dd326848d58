"""Per-kind success and failure rules: each kind's `UpdateJobStatus` (kubeflow-v1.md §1 "success rules").

A rule reads the replica counters of this reconcile (active = Running pods, succeeded, failed) and sets
Running / Restarting / Succeeded / Failed. Kinds differ only in which replica decides success and in whether a
failed replica means Restarting or Failed; the three shapes below cover all seven kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from localkube.controllers import conditions as cond
from localkube.controllers.kubeflow_job import REPLICA_INDEX, REPLICA_TYPE, JobView

Recorder = Callable[[str, str, str], None]  # (event type, reason, message) on the job
StatusRule = Callable[["StatusContext"], None]


@dataclass
class StatusContext:
    job: JobView
    status: dict
    pods: list[dict]
    record: Recorder

    @property
    def kind(self) -> str:
        return self.job.data.kind

    def counters(self, rtype: str) -> tuple[int, int, int, int]:
        """(succeeded, active, failed, expected = replicas - succeeded)."""
        succeeded, active, failed = (
            cond.count(self.status, rtype, n) for n in ("succeeded", "active", "failed")
        )
        return succeeded, active, failed, self.job.replicas(rtype) - succeeded

    def _set(self, type_: str, reason: str, message: str, event: str | None) -> None:
        before = self.status.get("conditions")
        if type_ in (cond.SUCCEEDED, cond.FAILED):
            cond.finish(self.status, type_, reason, message)
        else:
            cond.set_condition(self.status, type_, "True", reason, message)
        if event and self.status.get("conditions") != before:
            self.record(event, reason, message)

    # Messages as TO-1.9 words them: "qualified" ones name the job `namespace/name` (TFJob and JAXJob always,
    # PyTorchJob and PaddleJob without a Master); the others (Master-decided, XGBoost, MPI, MXNet) name it
    # `name` and say "is successfully completed". Only TFJob's Failed message is qualified ("has failed").
    def _subject(self, qualified: bool) -> str:
        job = self.job
        return f"{self.kind} {job.namespace}/{job.name}" if qualified else f"{self.kind} {job.name}"

    def running(self, *, qualified: bool = True) -> None:
        self._set(cond.RUNNING, f"{self.kind}Running", f"{self._subject(qualified)} is running.", None)

    def succeed(self, *, qualified: bool = True) -> None:
        done = "successfully completed." if qualified else "is successfully completed."
        self._set(cond.SUCCEEDED, f"{self.kind}Succeeded", f"{self._subject(qualified)} {done}", "Normal")

    def restarting(self, rtype: str, failed: int) -> None:
        message = f"{self.kind} {self.job.name} is restarting because {failed} {rtype} replica(s) failed."
        self._set(cond.RESTARTING, f"{self.kind}Restarting", message, "Warning")

    def fail(self, rtype: str, failed: int, reason: str | None = None, *, qualified: bool = False) -> None:
        verb = "has failed" if qualified else "is failed"
        message = f"{self._subject(qualified)} {verb} because {failed} {rtype} replica(s) failed."
        self._set(cond.FAILED, reason or f"{self.kind}Failed", message, "Normal")


def tensorflow(ctx: StatusContext) -> None:
    """Chief/Master decides; without one, worker 0 (default policy) or all workers (`AllWorkers`)."""
    job = ctx.job
    has_chief = job.has("Chief") or job.has("Master")
    worker0_done = not job.has("Worker") or _worker0_completed(ctx)
    all_workers = job.spec.get("successPolicy") == "AllWorkers"
    restarting = next((c for c in ctx.status.get("conditions") or [] if c["type"] == cond.RESTARTING), None)
    for rtype in ("Chief", "Evaluator", "Master", "PS", "Worker"):
        if not job.has(rtype):
            continue
        _succeeded, active, failed, expected = ctx.counters(rtype)
        if has_chief and rtype in ("Chief", "Master"):
            if active > 0:
                ctx.running()
            if expected == 0:
                ctx.succeed()
        elif not has_chief and rtype == "Worker":
            if expected == 0 or (worker0_done and not all_workers):
                ctx.succeed()
            elif active > 0:
                ctx.running()
        if failed > 0:
            if restarting is not None:
                cond.set_condition(
                    ctx.status, cond.RESTARTING, "True", restarting["reason"], restarting["message"]
                )
            elif not (job.spec.get("enableDynamicWorker") and rtype == "Worker"):
                ctx.fail(rtype, failed, qualified=True)


def _worker0_completed(ctx: StatusContext) -> bool:
    for pod in ctx.pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(REPLICA_TYPE) != "worker" or labels.get(REPLICA_INDEX) != "0":
            continue
        if (pod.get("status") or {}).get("phase") == "Succeeded" and default_exit_code(pod, ctx.job) == 0:
            return True
    return False


def default_exit_code(pod: dict, job: JobView) -> int:
    """Exit code of the default-named container; 0xbeef (retryable) when there is none."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if status.get("name") == job.data.container and terminated:
            return int(terminated.get("exitCode", 0))
    return 0xBEEF


def master_or_workers(master: str | None, *, elastic: bool = False) -> StatusRule:
    """PyTorch, Paddle, JAX: the Master decides if there is one, else the Workers (all, or any if elastic).
    A failed replica with pods missing means Restarting unless its restartPolicy is Never."""

    def rule(ctx: StatusContext) -> None:
        job = ctx.job
        with_master = master is not None and job.has(master)
        for rtype in job.specs:
            ctx.status["replicaStatuses"][rtype]["selector"] = job.selector(rtype)
            succeeded, active, failed, expected = ctx.counters(rtype)
            if with_master and rtype == master:
                if active > 0:
                    ctx.running(qualified=False)
                if expected == 0:
                    ctx.succeed(qualified=False)
                    return
            elif not with_master and rtype == "Worker":
                if expected == 0 or (elastic and job.spec.get("elasticPolicy") is not None and succeeded > 0):
                    ctx.succeed()
                elif active > 0:
                    ctx.running()
            if failed > 0 and job.replicas(rtype) > succeeded + active:
                if job.restart_policy(rtype) != "Never":
                    ctx.restarting(rtype, failed)
                else:
                    ctx.fail(rtype, failed)

    return rule


def leader(
    is_leader: Callable[[JobView, str], bool],
    *,
    running_first: bool = False,
    failed_reason: str | None = None,
) -> StatusRule:
    """XGBoost (Master), MXNet (Scheduler), MPI (Launcher): the leader decides success; any failed replica
    fails the job, or marks it Restarting when the replica's restartPolicy is ExitCode."""

    def rule(ctx: StatusContext) -> None:
        job = ctx.job
        for rtype in job.specs:
            _succeeded, active, failed, expected = ctx.counters(rtype)
            if is_leader(job, rtype):
                if active > 0:
                    ctx.running(qualified=False)
                if expected == 0:
                    if running_first:
                        ctx.running(qualified=False)
                    ctx.succeed(qualified=False)
                    return
            if failed > 0:
                if running_first:
                    ctx.running(qualified=False)
                if job.restart_policy(rtype) == "ExitCode":
                    ctx.restarting(rtype, failed)
                else:
                    ctx.fail(rtype, failed, failed_reason)

    return rule


def is_type(name: str) -> Callable[[JobView, str], bool]:
    return lambda _job, rtype: rtype == name


def mxnet_leader(job: JobView, rtype: str) -> bool:
    """The Scheduler, or the only replica of a single-worker job."""
    single = job.replicas("Worker") == 1 and job.replicas("Scheduler") == 0 and job.replicas("Server") == 0
    return rtype == "Scheduler" or single
