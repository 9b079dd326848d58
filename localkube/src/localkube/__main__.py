"""Command line: `serve` a local cluster, run an `agent` against any API server, or program `fault`s.

python -m localkube serve --port 0 --kubeconfig PATH --runtime scripted
python -m localkube agent --kubeconfig PATH --runtime process --controllers kubeflow
python -m localkube fault --kubeconfig PATH throttle --count 3 --retry-after 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from localkube.controllers import CONTROLLER_NAMES as CONTROLLERS

FAULTS = {
    "throttle": "status",
    "fail": "status",
    "drop": "drop",
    "latency": "latency",
    "expire-watch": "expire_watch",
    "end-watch": "end_watch",
}  # command -> FaultRule action
COMMANDS = (*FAULTS, "end-watches", "restart", "clear", "list", "requests")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m localkube",
        description="localkube: a local Kubernetes API for training jobs",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a cluster until SIGTERM or SIGINT")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    serve.add_argument("--kubeconfig", required=True, type=Path, help="where to write the kubeconfig")
    serve.add_argument("--runtime", default="scripted", choices=("scripted", "process", "none"))
    serve.add_argument(
        "--crd-dir",
        type=Path,
        action="append",
        help="serve and validate the custom resources of these CRD YAMLs (repeat for several directories)",
    )
    serve.add_argument("--no-controllers", action="store_true", help="serve the API only")
    serve.add_argument(
        "--controllers",
        type=_controller_names,
        help="comma-separated controllers to run, `all` (the default) or `none`: " + ", ".join(CONTROLLERS),
    )
    serve.add_argument(
        "--namespace", default="default", help="the kubeconfig context's namespace (created if need be)"
    )
    agent = commands.add_parser(
        "agent", help="run controllers and a kubelet against an existing API server until SIGTERM or SIGINT"
    )
    agent.add_argument("--kubeconfig", type=Path, help="the server's kubeconfig (default: $KUBECONFIG)")
    agent.add_argument("--context", help="a context of the kubeconfig other than its current one")
    agent.add_argument("--runtime", default="process", choices=("scripted", "process", "none"))
    agent.add_argument(
        "--controllers",
        type=_controller_names,
        default=[],
        help="comma-separated controllers to run, `all` or `none` (the default): " + ", ".join(CONTROLLERS),
    )
    agent.add_argument("--node-name", default="localkube-agent", help="the Node the agent registers")
    agent.add_argument(
        "--address", default="127.0.0.1", help="the node's InternalIP; the kubelet listens there"
    )
    agent.add_argument(
        "--kubelet-port", type=int, default=0, help="the kubelet's HTTPS port; 0 picks a free one"
    )
    agent.add_argument(
        "--client-ca-file",
        type=Path,
        help="the kubelet endpoint requires a client certificate signed by this CA (kube-apiserver's "
        "--kubelet-client-certificate) and authorizes its user by SubjectAccessReview",
    )
    agent.add_argument(
        "--heartbeat-seconds", type=float, default=10.0, help="how often the node's Lease is renewed"
    )
    agent.add_argument(
        "--node-status-seconds",
        type=float,
        help="how often the Node's status is posted (default: as the Lease)",
    )
    fault = commands.add_parser("fault", help="program a fault into a running cluster")
    fault.add_argument("--kubeconfig", required=True, type=Path, help="the kubeconfig `serve` wrote")
    fault.add_argument("what", choices=COMMANDS)
    fault.add_argument("--code", type=int, default=500, help="for fail: 400, 403, 429, 500, 503 or 504")
    fault.add_argument("--count", type=int, default=1, help="matching requests to affect; 0 = all")
    fault.add_argument("--method", help="only this HTTP method")
    fault.add_argument("--path", help="only paths matching this regular expression")
    fault.add_argument("--resource", help="only this resource (plural)")
    fault.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds of a 429")
    fault.add_argument("--seconds", type=float, default=0.0, help="latency, or when an end-watch ends it")
    return parser


def _controller_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return list(CONTROLLERS)
    if names in ([], ["none"]):
        return []
    if unknown := sorted(set(names) - set(CONTROLLERS)):
        raise argparse.ArgumentTypeError(f"unknown controllers {', '.join(unknown)}")
    return names


def _until_signalled() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop


async def _serve(args: argparse.Namespace) -> None:
    from localkube.cluster import LocalKube
    from localkube.controllers import controllers_named

    controllers = None if args.controllers is None else controllers_named(args.controllers)
    cluster = LocalKube(
        runtime=args.runtime,
        crd_dir=args.crd_dir,
        host=args.host,
        port=args.port,
        controllers=[] if args.no_controllers else controllers,
        namespaces=(args.namespace,),
    )
    stop = _until_signalled()
    async with cluster:
        path = cluster.write_kubeconfig(args.kubeconfig, args.namespace)
        print(f"localkube serving {cluster.url} kubeconfig {path}", flush=True)
        await stop.wait()


async def _agent(args: argparse.Namespace) -> None:
    from localkube.agent import Agent

    agent = Agent(
        args.kubeconfig,
        runtime=args.runtime,
        controllers=args.controllers,
        node_name=args.node_name,
        address=args.address,
        kubelet_port=args.kubelet_port,
        context=args.context,
        heartbeat_seconds=args.heartbeat_seconds,
        node_status_seconds=args.node_status_seconds,
        client_ca_file=args.client_ca_file,
    )
    stop = _until_signalled()
    async with agent:
        kubelet = agent.kubelet_url if agent.runtime else "none"
        controllers = ",".join(args.controllers) or "none"
        print(
            f"localkube agent node {agent.node_name} kubelet {kubelet} runtime {args.runtime} "
            f"controllers {controllers}",
            flush=True,
        )
        await stop.wait()


def _server_of(kubeconfig: Path) -> tuple[str, str]:
    """(server URL, token) of the kubeconfig's current context."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    return cluster["server"], user["token"]


def _fault_request(args: argparse.Namespace) -> tuple[str, str, dict | None]:
    """(method, admin path, body) for the fault command."""
    if args.what in FAULTS:
        rule: dict[str, Any] = {"action": FAULTS[args.what], "count": args.count or None}
        if args.what in ("throttle", "fail"):
            rule.update(code=429 if args.what == "throttle" else args.code, retry_after=args.retry_after)
        if args.what in ("latency", "end-watch"):
            rule["seconds"] = args.seconds
        rule.update({k: v for k in ("method", "path", "resource") if (v := getattr(args, k))})
        return "POST", "faults", rule
    return {
        "end-watches": ("POST", "end-watches", None),
        "restart": ("POST", "restart", None),
        "clear": ("DELETE", "faults", None),
        "list": ("GET", "faults", None),
        "requests": ("GET", "requests", None),
    }[args.what]


def _fault(args: argparse.Namespace) -> None:
    url, token = _server_of(args.kubeconfig)
    method, path, body = _fault_request(args)
    request = urllib.request.Request(
        f"{url}/localkube/{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        print(json.dumps(json.loads(response.read()), indent=2))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        asyncio.run(_serve(args))
    elif args.command == "agent":
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        asyncio.run(_agent(args))
    else:
        _fault(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
