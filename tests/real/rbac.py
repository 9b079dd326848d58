"""A ServiceAccount bound to a chosen set of Role rules, in a namespace of its own, on a real cluster: the
documented Role of docs/rbac.md, or that Role with one rule or one verb of a rule removed.

    grant = bind(real_cluster, without(documented_rules(), "pods", "list"), "rbac-pods-list")
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", grant.connection_json)
    ... run the operator in ``grant.namespace`` ...
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from localkube.pytest_plugin import connection_json
from localkube.realcluster import RealCluster

RBAC_DOC = Path(__file__).resolve().parents[2] / "docs" / "rbac.md"
ACCOUNT = "airflow-worker"
SA_GROUPS = ("system:serviceaccounts", "system:authenticated")


def documented_rules() -> list[dict[str, Any]]:
    """The rules of the Role in docs/rbac.md (a fresh copy each call)."""
    blocks = re.findall(r"```yaml\n(.*?)```", RBAC_DOC.read_text(), re.S)
    (role,) = [d for block in blocks for d in yaml.safe_load_all(block) if d and d["kind"] == "Role"]
    return copy.deepcopy(role["rules"])


def without(
    rules: list[dict[str, Any]], resource: str, verb: str | None = None, group: str = ""
) -> list[dict[str, Any]]:
    """``rules`` less ``verb`` (every verb when None) on ``resource`` of API ``group``, and nothing else: a
    rule that also names other resources keeps them with all their verbs. Raises if nothing was granted."""
    out: list[dict[str, Any]] = []
    removed = False
    for rule in copy.deepcopy(rules):
        if group not in rule["apiGroups"] or resource not in rule["resources"]:
            out.append(rule)
            continue
        others = [r for r in rule["resources"] if r != resource]
        if others:
            out.append({**rule, "resources": others})
        verbs = [v for v in rule["verbs"] if verb is not None and v != verb]
        removed = removed or verbs != rule["verbs"]
        if verbs:
            out.append({**rule, "resources": [resource], "verbs": verbs})
    if not removed:
        raise ValueError(f"no rule grants {verb or 'any verb'} on {resource} in API group {group!r}")
    return out


@dataclass(frozen=True)
class Grant:
    """A ServiceAccount ``user`` that may do what the Role allows in ``namespace`` (and nothing else)."""

    namespace: str
    user: str
    kubeconfig: Path

    @property
    def connection_json(self) -> str:
        """The ``AIRFLOW_CONN_...`` value of a kubernetes connection as this account, in its namespace."""
        return connection_json(self.kubeconfig, self.namespace)


def bind(cluster: RealCluster, rules: list[dict[str, Any]], namespace: str) -> Grant:
    """Create ``namespace`` with ServiceAccount ``airflow-worker`` bound to a Role of exactly ``rules`` there;
    returns once the API server's authorizer has seen the binding."""
    cluster.create_namespace(namespace)
    meta = {"name": ACCOUNT, "namespace": namespace}
    cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    rbac = "rbac.authorization.k8s.io/v1"
    cluster.apply({"apiVersion": rbac, "kind": "Role", "metadata": meta, "rules": rules})
    cluster.apply(
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": meta,
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
        }
    )
    user = f"system:serviceaccount:{namespace}:{ACCOUNT}"
    if rules:  # the authorizer reads Roles and RoleBindings from an informer: wait until it has both
        rule = rules[0]
        first = (rule["apiGroups"][0], rule["resources"][0], rule["verbs"][0])
        cluster.wait_for(lambda: allowed(cluster, user, namespace, *first), 30)
    token = cluster.service_account_token(namespace, ACCOUNT)
    return Grant(namespace, user, cluster.kubeconfig_for(user, token))


def allowed(cluster: RealCluster, user: str, namespace: str, group: str, resource: str, verb: str) -> bool:
    """The API server's answer to a SubjectAccessReview (as `kubectl auth can-i --as` asks it)."""
    subresource = ""
    if "/" in resource:
        resource, subresource = resource.split("/", 1)
    sa_namespace = user.split(":")[2]
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": [*SA_GROUPS, f"system:serviceaccounts:{sa_namespace}"],
            "resourceAttributes": {
                "namespace": namespace,
                "group": group,
                "resource": resource,
                "subresource": subresource,
                "verb": verb,
            },
        },
    }
    answer = json.loads(cluster.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review))
    return bool(answer["status"].get("allowed"))
