"""TensorStack T9k `GenericJob` (tensorstack-t9k.md §1.8, §3 "GenericJob"), on the T9k training-job pieces.

Replicas (`replicaSpecs[]`, free type names) run as pods `<job>-<type>-<index>` with a headless Service of the
same name exposing `spec.service.ports`, labelled `tensorstack.dev/owner-name`, `genericjob`,
`genericjob-replica` and `tensorstack.dev/component: genericjob`. No env is injected; `$(type)`, `$(rank)`,
`$(replicas[<type>])`, `$(service.<type>[<rank>].host)` and `$(service.port[<name>])` are substituted in
command, args and env values. `restartPolicy` is `{policy: Always|OnFailure|Never, limit}` (default OnFailure,
limit 0): a failed pod is replaced while it has restarted fewer than `limit` times (Always as OnFailure);
`tasks[].restartCount` sums them, there is no `backoffCount`.

The job succeeds when every replica one success rule lists (`[{"<type>": [<index>, ...]}, ...]`) succeeded,
and fails when every replica one failure rule lists failed for good (message `The job is failed with rule:
{"worker":["0"]}`), or when no success rule can be met any more. Guesses where the docs are silent: without
success rules every replica must succeed; the no-rule-left failure message; the service's default of no ports.
`cleanUpPolicy` (top level), pause and debug modes work as for the training jobs.
"""

from __future__ import annotations

import json
import re

from localkube.controllers.kubeflow import phase
from localkube.controllers.tensorstack import (
    OWNER_LABEL,
    Job,
    PerPodRestarts,
    T9kKind,
    TensorStackController,
)

GENERICJOB = T9kKind("GenericJob", "", 0, "OnFailure", lambda types: "")
_VARIABLE = re.compile(
    r"\$\((?:(type)|(rank)|replicas\[([^\]]+)\]|service\.port\[([^\]]+)\]|service\.([^\[\]]+)\[(\d+)\]\.host)\)"
)
Replica = tuple[str, int]  # type, index


class GenericJobView(Job):
    """A GenericJob: restart policies are objects and `cleanUpPolicy` sits at the top of the spec."""

    def __init__(self, raw: dict) -> None:
        super().__init__(GENERICJOB, raw)
        self.run_policy = {"cleanUpPolicy": self.spec.get("cleanUpPolicy")}
        self.ports = {
            str(p.get("name")): p.get("port") for p in (self.spec.get("service") or {}).get("ports") or []
        }

    def rules(self, field: str) -> list[tuple[dict, set[Replica]]]:
        """Each rule as written and the replicas it lists."""
        return [
            (rule, {(str(t), int(i)) for t, indices in rule.items() for i in indices or []})
            for rule in self.spec.get(field) or []
        ]

    def substitute(self, text: str, rtype: str, index: int) -> str:
        def value(match: re.Match) -> str:
            type_, rank, replicas, port, service, rank_of = match.groups()
            if type_:
                return rtype
            if rank:
                return str(index)
            if replicas is not None:
                return str(self.replicas(replicas)) if replicas in self.specs else match[0]
            if port is not None:
                return str(self.ports[port]) if port in self.ports else match[0]
            return self.host(service, int(rank_of))

        return _VARIABLE.sub(value, text)


class GenericReconciliation(PerPodRestarts):
    """One pass over one GenericJob: the training-job pass with GenericJob's labels, ports and rules."""

    job: GenericJobView

    def pod_labels(self, rtype: str, index: int) -> dict[str, str]:
        name = self.job.pod_name(rtype, index)
        return {
            OWNER_LABEL: self.job.name,
            "genericjob": self.job.name,
            "genericjob-replica": name,
            "tensorstack.dev/component": "genericjob",
            "tensorstack.dev/component-type": "user",
        }

    def service_ports(self, rtype: str) -> list[dict]:
        return [{"name": name, "port": port} for name, port in self.job.ports.items()]

    def template(self, rtype: str, index: int) -> dict:
        template = super().template(rtype, index)
        for container in (template.get("spec") or {}).get("containers") or []:
            for key in ("command", "args"):
                if container.get(key):
                    container[key] = [self.job.substitute(str(a), rtype, index) for a in container[key]]
            for var in container.get("env") or []:
                if isinstance(var.get("value"), str):
                    var["value"] = self.job.substitute(var["value"], rtype, index)
        return template

    def decide(self) -> tuple[str, str] | None:
        job = self.job
        failed = {job.replica_of(name) for name in self.failed_for_good()}
        succeeded = {job.replica_of(name) for name, pod in self.pods.items() if phase(pod) == "Succeeded"}
        every = {(t, i) for t in job.specs for i in range(job.replicas(t))}
        success_rules = job.rules("successRules") or [({}, every)]
        if any(listed <= succeeded for _rule, listed in success_rules):
            return "Succeeded", "The job has finished successfully."
        for rule, listed in job.rules("failureRules"):
            if listed and listed <= failed:
                return "Failed", f"The job is failed with rule: {json.dumps(rule, separators=(',', ':'))}"
        if all(listed & failed for _rule, listed in success_rules):
            return "Failed", "The job is failed: no success rule can be met"
        return None


class GenericJobController(TensorStackController):
    """Reconciles GenericJobs."""

    def __init__(self) -> None:
        super().__init__((GENERICJOB,))

    def make_pass(self, kind: T9kKind, raw: dict) -> GenericReconciliation:
        return GenericReconciliation(self, GenericJobView(raw))
