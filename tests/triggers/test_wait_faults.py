"""Every read of a wait rides out transient API errors (429 with Retry-After, 5xx, dropped connections) until
the deadline, and the job's real outcome is reported; what retrying cannot fix (403, a missing CRD, a 401
after reloading the credentials) ends the wait with an error naming the request.

The faults are localkube's, met by the real TrainingJobTrigger / JobWaiter over HTTP. More faults than the
hook's RetryPolicy has attempts (6) are answered in a row, with Retry-After: 0 so no test waits on a clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_training.hooks.training import AsyncTrainingJobHook
from airflow_provider_training.kinds.base import PODS, ResourceRef
from airflow_provider_training.kinds.registry import get_kind
from airflow_provider_training.triggers.training import TrainingJobTrigger
from airflow_provider_training.waiting import JobWaiter, WaitOptions
from airflow_provider_training.watch import WatchHub
from tests.hooks.family_objects import scripted_edl_job
from tests.operators.harness import KIND_BY_NAME, NAMESPACE, manifest, resource
from tests.triggers.test_trigger import first, trigger_for

pytestmark = pytest.mark.timeout(60)
PYTORCH = KIND_BY_NAME["PyTorchJob"]
MORE_THAN_ATTEMPTS = 8
LOGS = ["epoch 1 loss 0.9", "epoch 2 loss 0.5", "model saved"]


@pytest.fixture
def faults(cluster):
    cluster.faults.clear()
    yield cluster.faults
    cluster.faults.clear()


def deadline(seconds: float = 45.0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def throttle(faults, **match):
    """More 429s in a row than the hook's attempts, each with Retry-After: 0."""
    return faults.throttle(count=MORE_THAN_ATTEMPTS, retry_after=0, **match)


def create(cluster, name, script, **options):
    body = manifest(PYTORCH, script, name=name, **options)
    return cluster.store.create(resource(cluster, PYTORCH), NAMESPACE, body)


async def until_state(cluster, name, state):
    """Wait until localkube's controller has put the job in ``state`` (a sync point, not an assertion)."""
    rt = resource(cluster, PYTORCH)
    for _ in range(2000):
        conditions = (cluster.store.get(rt, NAMESPACE, name).get("status") or {}).get("conditions") or []
        if any(c["type"] == state and c["status"] == "True" for c in conditions):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name} never became {state}")


@contextlib.asynccontextmanager
async def synced_hub(cluster, *resources: ResourceRef):
    """The wait's hub already watching ``resources`` (as in a triggerer with other jobs), so the faults
    programmed next meet the wait's own reads, not the hub's first LIST and WATCH."""
    hook = AsyncTrainingJobHook()
    since = len(cluster.requests)
    async with contextlib.AsyncExitStack() as stack:
        for res in resources:
            events = await stack.enter_async_context(
                WatchHub.shared().subscribe(hook, res, NAMESPACE, name="someone-elses-job")
            )
            assert (await anext(events)).type == "DELETED"  # primed: the hub's LIST is done
        for res in resources:
            while not any(
                r.path.endswith(f"/{res.plural}") and r.query.get("watch") == "true" and r.status == 200
                for r in cluster.requests[since:]
            ):
                await asyncio.sleep(0.01)  # and its WATCH is open
        yield
    await hook.close()


# -- transient faults on each read of the wait path --------------------------------------------------------


async def test_confirming_get_of_a_job_missing_from_the_watch_cache(cluster, faults):
    async with synced_hub(cluster, PYTORCH_RESOURCE := get_kind("PyTorchJob").resource):
        assert PYTORCH_RESOURCE.plural == "pytorchjobs"
        rule = throttle(faults, method="GET", path=r"/pytorchjobs/confirm-me$")
        create(cluster, "confirm-me", {"default": {"duration": 0.1}})
        # No await between the create and the subscription: the hub's cache cannot have the job yet.
        event = await first(trigger_for("confirm-me", deadline=deadline(), get_logs=False))

    assert event["status"] == "success", event["message"]
    assert rule.hits == MORE_THAN_ATTEMPTS


@pytest.mark.parametrize("code", [429, 503])
async def test_events_read_for_a_stuck_pod_warning(cluster, faults, capsys, code):
    name = f"stuck-{code}"
    if code == 429:
        rule = throttle(faults, resource="events")
    else:
        rule = faults.fail(503, count=2, resource="events")
    create(cluster, name, {"Master": {"pending": "ImagePullBackOff"}, "default": {"duration": None}})

    event = await first(trigger_for(name, deadline=deadline(3), get_logs=False))
    await trigger_for(name).on_kill()

    assert event["status"] == "timeout", event["message"]  # what the job really did: it stayed stuck
    assert rule.hits == rule.count
    out = capsys.readouterr().out
    assert f"Replica pod {name}-master-0 of PyTorchJob default/{name} is stuck: ImagePullBackOff" in out
    assert "Failed to pull image" in out  # the events were read after all


async def test_final_pod_list_and_explanation_reads_of_a_failed_job(cluster, faults):
    create(cluster, "fails-under-load", {"Master": {"exit_code": 3, "logs": ["ValueError: bad batch"]}})
    await until_state(cluster, "fails-under-load", "Failed")
    async with synced_hub(cluster, get_kind("PyTorchJob").resource, PODS):
        rules = [
            throttle(faults, method="GET", path=r"/pods$"),  # the final LIST
            throttle(faults, resource="events"),  # the explanation's events
            faults.drop(count=2, path=r"/log$"),  # the failing replica's last lines
        ]
        event = await first(trigger_for("fails-under-load", deadline=deadline(), get_logs=False))

    assert event["status"] == "failed"
    assert [rule.hits for rule in rules] == [rule.count for rule in rules]
    assert "fails-under-load-master-0" in event["pods"]
    [failure] = event["replica_failures"]
    assert (failure["pod"], failure["exit_code"]) == ("fails-under-load-master-0", 3)
    # Read after the events: had the events' read given up, the explanation would have stopped before it.
    assert event["log_tail"]["fails-under-load-master-0"] == ["ValueError: bad batch"]


async def test_log_reads(cluster, faults, capsys):
    create(cluster, "logs-under-load", {"default": {"duration": 0.1, "logs": LOGS}})
    await until_state(cluster, "logs-under-load", "Succeeded")
    async with synced_hub(cluster, get_kind("PyTorchJob").resource, PODS):
        rules = [throttle(faults, path=r"/log$"), faults.drop(count=2, path=r"/log$")]
        event = await first(trigger_for("logs-under-load", deadline=deadline()))

    assert event["status"] == "success"
    assert [rule.hits for rule in rules] == [rule.count for rule in rules]
    out = capsys.readouterr().out
    for line in LOGS:
        assert out.count(f"[master-0] {line}") == 1, line
    assert "could not be read" not in out


async def test_children_reads(cluster, faults):
    edl = get_kind("TrainingJob", "paddlepaddle.org/v1")
    children = {child.resource for child in edl.children if child.needed_for_status} - {PODS}
    async with synced_hub(cluster, edl.resource, *children):
        rules = [
            throttle(faults, method="GET", path=r"/jobs/edl-under-load-trainer$"),  # a named child's GET
            faults.fail(503, count=2, resource="replicasets"),
        ]
        script = {"default": {"duration": 0.2}}
        cluster.store.create(
            cluster.store.resource_type("paddlepaddle.org", "v1", "trainingjobs"),
            NAMESPACE,
            scripted_edl_job("edl-under-load", script),
        )
        trigger = TrainingJobTrigger(
            kind="TrainingJob",
            api_version="paddlepaddle.org/v1",
            job_name="edl-under-load",
            namespace=NAMESPACE,
            deadline=deadline(),
            get_logs=False,
            check_interval=0.1,
        )
        event = await first(trigger)
        await trigger.on_kill()

    assert event["status"] == "success", event["message"]
    assert rules[0].hits == MORE_THAN_ATTEMPTS


async def test_retries_end_at_the_deadline_as_a_timeout(cluster, faults):
    async with synced_hub(cluster, get_kind("PyTorchJob").resource):
        faults.throttle(count=None, retry_after=1, method="GET", path=r"/throttled-past-deadline$")
        create(cluster, "throttled-past-deadline", {"default": {"duration": 0.1}})
        event = await first(trigger_for("throttled-past-deadline", deadline=deadline(1.5), get_logs=False))

    assert event["status"] == "timeout"
    assert "get pytorchjobs.kubeflow.org default/throttled-past-deadline: 429" in event["message"]


# -- what retrying cannot fix ends the wait, naming the request ---------------------------------------------


async def test_forbidden_pod_list_ends_the_wait(cluster, faults):
    create(cluster, "no-pod-rights", {"default": {"duration": None}})
    faults.fail(403, count=None, method="GET", path=r"/pods$")

    event = await first(trigger_for("no-pod-rights", deadline=deadline(), get_logs=False))
    faults.clear()
    await trigger_for("no-pod-rights").on_kill()

    assert event["status"] == "error"
    assert event["message"].startswith(
        "Kubernetes refused `list` on `pods` in namespace default (403 Forbidden): the connection's "
        "identity lacks this permission; docs/rbac.md lists the Role it needs."
    )


async def test_forbidden_events_leave_a_stuck_pod_warning_and_the_wait_goes_on(cluster, faults, capsys):
    faults.fail(403, count=None, resource="events")
    create(
        cluster, "stuck-no-events", {"Master": {"pending": "ImagePullBackOff"}, "default": {"duration": None}}
    )

    event = await first(trigger_for("stuck-no-events", deadline=deadline(3), get_logs=False))
    faults.clear()
    await trigger_for("stuck-no-events").on_kill()

    assert event["status"] == "timeout", event["message"]  # what the job did: it stayed stuck
    out = capsys.readouterr().out
    assert "Replica pod stuck-no-events-master-0 of PyTorchJob default/stuck-no-events is stuck" in out
    refused = "events could not be read: Kubernetes refused `list` on `events` in namespace default (403"
    assert out.count(refused) == 1  # warned once, however many reads were refused
    assert any(note.startswith(refused) for note in event["notes"])


async def test_forbidden_events_still_explain_a_failure(cluster, faults):
    create(cluster, "fails-no-events", {"Master": {"exit_code": 3, "logs": ["ValueError: bad batch"]}})
    await until_state(cluster, "fails-no-events", "Failed")
    rule = faults.fail(403, count=None, resource="events")

    event = await first(trigger_for("fails-no-events", deadline=deadline(), get_logs=False))

    assert event["status"] == "failed" and rule.hits >= 1
    [failure] = event["replica_failures"]
    assert (failure["pod"], failure["exit_code"]) == ("fails-no-events-master-0", 3)
    assert event["log_tail"]["fails-no-events-master-0"] == ["ValueError: bad batch"]
    assert event["events"] == []
    assert [n for n in event["notes"] if "Kubernetes refused `list` on `events`" in n]


async def test_missing_crd_ends_the_wait(cluster):
    pytorch = get_kind("PyTorchJob")
    uninstalled = dataclasses.replace(
        pytorch, resource=ResourceRef("example.org", "v1", "nosuchjobs", "NoSuchJob")
    )
    hook = AsyncTrainingJobHook()
    try:
        waiter = JobWaiter(
            hook,
            uninstalled,
            "any",
            NAMESPACE,
            WaitOptions(deadline=datetime.now(UTC) + timedelta(seconds=30)),
            _Log(),
        )
        event = (await waiter.wait()).to_payload()
    finally:
        await hook.close()

    assert event["status"] == "error"
    assert event["message"].startswith(
        "list nosuchjobs.example.org in namespace default: 404 NotFound: "
        "the server could not find the requested resource"
    )
    assert "CustomResourceDefinition" in event["message"]


async def test_unauthorized_after_reloading_the_credentials_ends_the_wait(cluster, faults):
    create(cluster, "token-revoked", {"default": {"duration": None}})
    original = cluster.token
    since = len(cluster.requests)
    waiting = asyncio.create_task(first(trigger_for("token-revoked", deadline=deadline(), get_logs=False)))
    try:
        while not any(r.query.get("watch") == "true" for r in cluster.requests[since:]):
            await asyncio.sleep(0.01)  # the wait follows the job
        cluster.token = "revoked-" + original  # the kubeconfig's token no longer works, even re-read
        faults.end_watches()  # the hub reconnects with it
        event = await waiting
    finally:
        cluster.token = original
    await trigger_for("token-revoked").on_kill()

    assert event["status"] == "error"
    assert event["message"].startswith("watch ")
    assert ": 401 Unauthorized" in event["message"]
    assert "after reloading the credentials" in event["message"]


async def test_a_rotated_token_is_reloaded_and_the_wait_goes_on(cluster, faults, tmp_path, monkeypatch):
    from localkube.pytest_plugin import connection_json

    original = cluster.token
    path = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("AIRFLOW_CONN_ROTATING", connection_json(path))
    create(cluster, "token-rotated", {"default": {"duration": None}})
    since = len(cluster.requests)
    waiting = asyncio.create_task(
        first(
            trigger_for("token-rotated", kubernetes_conn_id="rotating", deadline=deadline(), get_logs=False)
        )
    )
    try:
        while not any(r.query.get("watch") == "true" for r in cluster.requests[since:]):
            await asyncio.sleep(0.01)
        cluster.token = "rotated-" + original
        cluster.write_kubeconfig(path)  # what an exec plugin or a refreshed secret does
        faults.end_watches()
        while not any(r.status == 401 for r in cluster.requests[since:]):
            await asyncio.sleep(0.01)
        rt = resource(cluster, PYTORCH)
        job = cluster.store.get(rt, NAMESPACE, "token-rotated")
        cluster.store.delete(rt, NAMESPACE, "token-rotated")
        event = await waiting
    finally:
        cluster.token = original

    assert job["metadata"]["name"] == "token-rotated"
    assert event["status"] == "deleted"  # the wait saw its job go: it kept following after the 401


class _Log:
    """The waiter's task log, kept for assertions."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _add(self, message: str, *args: object, **_: object) -> None:
        self.lines.append(message % args if args else message)

    info = warning = error = exception = _add
