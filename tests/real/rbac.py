"""A ServiceAccount bound to a chosen set of Role rules, in a namespace of its own, on a real cluster: the
documented Role of docs/rbac.md, or that Role with one rule or one verb of a rule removed.

    grant = bind(real_cluster, without(documented_rules(), "pods", "list"), "rbac-pods-list")
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", grant.connection_json)
    ... run the operator in ``grant.namespace`` ...
    set_rules(real_cluster, grant, documented_rules())  # another rule set for the same account

``without(rules, resource, verb, group)`` removes one verb (``verb=None``: every verb) of one resource and
nothing else; ``bind`` and ``set_rules`` wait until the API server's authorizer applies the Role, so a test
never races it.
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


def documented_rbac() -> list[dict[str, Any]]:
    """The Role and RoleBinding of docs/rbac.md, parsed from its YAML code blocks (a fresh copy each call);
    the page's other documents (the ClusterRole that TrainJobOperator's runtime check needs) are left out."""
    blocks = re.findall(r"```yaml\n(.*?)```", RBAC_DOC.read_text(), re.S)
    documents = [d for block in blocks for d in yaml.safe_load_all(block) if d]
    namespaced = [d for d in documents if d["kind"] in ("Role", "RoleBinding")]
    assert [d["kind"] for d in namespaced] == ["Role", "RoleBinding"], documents
    return namespaced


def documented_rules() -> list[dict[str, Any]]:
    """The rules of the Role in docs/rbac.md (a fresh copy each call)."""
    return list(documented_rbac()[0]["rules"])


def bind_documented(cluster: RealCluster) -> Path:
    """The Role and RoleBinding of docs/rbac.md applied exactly as written (the ServiceAccount in its own
    namespace, the Role in the jobs' namespace); a kubeconfig with the account's token."""
    role, binding = documented_rbac()
    (subject,) = binding["subjects"]
    for name in {role["metadata"]["namespace"], subject["namespace"]}:
        cluster.create_namespace(name)
    meta = {"name": subject["name"], "namespace": subject["namespace"]}
    cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    cluster.apply(role)
    cluster.apply(binding)
    token = cluster.service_account_token(subject["namespace"], subject["name"])
    return cluster.kubeconfig_for(f"system:serviceaccount:{subject['namespace']}:{subject['name']}", token)


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
    grant = Grant(
        namespace, user, cluster.kubeconfig_for(user, cluster.service_account_token(namespace, ACCOUNT))
    )
    _wait_effective(cluster, grant, permissions(rules), set())
    return grant


def set_rules(cluster: RealCluster, grant: Grant, rules: list[dict[str, Any]]) -> None:
    """Replace the rules of ``grant``'s Role; returns once the authorizer allows what they add and refuses
    what they remove."""
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{grant.namespace}/roles/{ACCOUNT}"
    role = cluster.get(path)
    before = permissions(role.get("rules") or [])
    cluster.request("PUT", path, {**role, "rules": rules})
    after = permissions(rules)
    _wait_effective(cluster, grant, after - before, before - after)


Permission = tuple[str, str, str]  # API group, resource (with subresource), verb


def permissions(rules: list[dict[str, Any]]) -> set[Permission]:
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def _wait_effective(
    cluster: RealCluster, grant: Grant, granted: set[Permission], refused: set[Permission]
) -> None:
    """The authorizer reads Roles and RoleBindings from an informer: wait until it has caught up. A Role is
    one object, so one permission it grants (or no longer grants) shows that its version is the one seen."""
    grants = sorted(granted)[:1]
    refusals = sorted(refused)[:1]

    def effective() -> bool:
        return all(allowed(cluster, grant.user, grant.namespace, *p) for p in grants) and not any(
            allowed(cluster, grant.user, grant.namespace, *p) for p in refusals
        )

    cluster.wait_for(effective, 30)


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
