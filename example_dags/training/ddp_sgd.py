"""Data-parallel training of a small classifier, one process per PyTorchJob replica.

Every replica reads the rendezvous exactly as a PyTorchJob provides it: MASTER_ADDR, MASTER_PORT, WORLD_SIZE
and RANK (or, in a Kubeflow Trainer v2 TrainJob, the PET_* variables torchrun reads, one process per node).
Each replica trains on its own shard of the data; after every step the gradients are averaged across all
replicas (an all-reduce), so every replica holds the same weights, as DistributedDataParallel does.

With torch installed (and ``--backend auto``) the same training runs as torch DDP over gloo.
Without it, a numpy implementation exchanges gradients over TCP: rank 0 (the Master) listens on MASTER_PORT,
the workers connect, and rank 0 reduces and broadcasts the averaged gradient.

The data is a synthetic separable set, or a snapshot written with ``--make-data PATH`` and read with
``--data PATH``. The last ``--val-fraction`` of it is held out; rank 0 evaluates the final model on it and
writes ``--metrics-out`` (JSON: loss, val_loss, val_accuracy, ...) and ``--model-out`` (JSON weights).
``--baseline-model`` adds the scores of an earlier model (e.g. the one in production) on the same data.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

FEATURES = 8

Data = tuple[np.ndarray, np.ndarray]


def make_data(samples: int, seed: int) -> Data:
    """A separable synthetic data set (features, 0/1 labels) with a little label noise."""
    rng = np.random.default_rng(seed)
    true_w = rng.normal(size=FEATURES)
    x = rng.normal(size=(samples, FEATURES))
    y = (x @ true_w + 0.1 * rng.normal(size=samples) > 0).astype(np.float64)
    return x, y


def load_data(args: argparse.Namespace) -> tuple[Data, Data]:
    """(train, validation): the snapshot ``--data`` or the synthetic set, its tail held out."""
    if args.data:
        with np.load(args.data) as snapshot:
            x, y = snapshot["x"], snapshot["y"]
    else:
        x, y = make_data(args.samples, args.seed)
    cut = len(y) - int(len(y) * args.val_fraction)
    return (x[:cut], y[:cut]), (x[cut:], y[cut:])


def shard(data: Data, rank: int, world_size: int) -> Data:
    """This rank's part of the training set: every world_size-th sample."""
    x, y = data
    return x[rank::world_size], y[rank::world_size]


def evaluate(w: np.ndarray, bias: float, data: Data) -> dict[str, float]:
    """Validation loss and accuracy of a linear classifier."""
    x, y = data
    loss, _ = loss_and_grad(w, x, y, bias)
    accuracy = float(np.mean(((x @ w + bias) > 0) == (y > 0.5))) if len(y) else float("nan")
    return {"val_loss": loss, "val_accuracy": accuracy}


def loss_and_grad(w: np.ndarray, x: np.ndarray, y: np.ndarray, bias: float = 0.0) -> tuple[float, np.ndarray]:
    """Logistic loss and its gradient with respect to ``w``."""
    p = 1.0 / (1.0 + np.exp(-(x @ w + bias)))
    eps = 1e-12
    loss = float(-np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)))
    return loss, x.T @ (p - y) / len(y)


class TcpAllReduce:
    """Averages a vector across ranks through rank 0 (a star all-reduce over plain TCP)."""

    def __init__(self, rank: int, world_size: int, addr: str, port: int, connect_timeout: float = 60.0):
        self.rank, self.world_size = rank, world_size
        self.peers: list[socket.socket] = []
        if world_size == 1:
            return
        if rank == 0:
            server = socket.create_server(("", port), reuse_port=False)
            server.settimeout(connect_timeout)
            for _ in range(world_size - 1):
                conn, _ = server.accept()
                self.peers.append(conn)
            server.close()
        else:
            self.peers.append(_connect(addr, port, connect_timeout))

    def average(self, vector: np.ndarray) -> np.ndarray:
        if self.world_size == 1:
            return vector
        if self.rank == 0:
            total = vector.copy()
            for peer in self.peers:
                total += _recv_vector(peer, vector.size)
            mean = total / self.world_size
            for peer in self.peers:
                _send_vector(peer, mean)
            return mean
        _send_vector(self.peers[0], vector)
        return _recv_vector(self.peers[0], vector.size)

    def close(self) -> None:
        for peer in self.peers:
            peer.close()


def _connect(addr: str, port: int, timeout: float) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((addr, port), timeout=timeout)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _send_vector(sock: socket.socket, vector: np.ndarray) -> None:
    payload = vector.astype("<f8").tobytes()
    sock.sendall(struct.pack("<I", len(payload)) + payload)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("peer closed the connection during the all-reduce")
        chunks.extend(chunk)
    return bytes(chunks)


def _recv_vector(sock: socket.socket, size: int) -> np.ndarray:
    (length,) = struct.unpack("<I", _recv_exact(sock, 4))
    if length != size * 8:
        raise ValueError(f"expected {size * 8} bytes, got {length}")
    return np.frombuffer(_recv_exact(sock, length), dtype="<f8").copy()


Model = tuple[np.ndarray, float]  # weights, bias


def train_numpy(
    args: argparse.Namespace, train_set: Data, rank: int, world_size: int, addr: str, port: int
) -> tuple[float, Model]:
    print(f"rank {rank}/{world_size}: numpy SGD, master {addr}:{port}", flush=True)
    loss, w, _ = data_parallel_sgd(
        train_set, rank, world_size, addr, port, epochs=args.epochs, lr=args.lr, step_delay=args.step_delay
    )
    return loss, (w, 0.0)


def data_parallel_sgd(
    train_set: Data,
    rank: int,
    world_size: int,
    addr: str,
    port: int,
    *,
    epochs: int,
    lr: float,
    step_delay: float = 0.0,
) -> tuple[float, np.ndarray, int]:
    """SGD on this rank's shard, the gradients averaged across the ranks after every step (numpy over TCP).
    Returns the final global loss, the weights, and how many samples all ranks trained on together (its sum
    proves that every rank took part)."""
    x, y = shard(train_set, rank, world_size)
    reducer = TcpAllReduce(rank, world_size, addr, port)
    w = np.zeros(FEATURES)
    loss = float("nan")
    try:
        for epoch in range(1, epochs + 1):
            local_loss, grad = loss_and_grad(w, x, y)
            # Average the loss together with the gradient so every rank logs the global loss.
            reduced = reducer.average(np.append(grad, local_loss))
            w -= lr * reduced[:-1]
            loss = float(reduced[-1])
            print(f"epoch {epoch} loss {loss:.4f}", flush=True)
            time.sleep(step_delay)
        trained = round(reducer.average(np.array([float(len(y))]))[0] * world_size)
    finally:
        reducer.close()
    return loss, w, trained


def train_torch(
    args: argparse.Namespace, train_set: Data, rank: int, world_size: int, addr: str, port: int
) -> tuple[float, Model]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world_size)
    x_np, y_np = shard(train_set, rank, world_size)
    x = torch.tensor(x_np, dtype=torch.float32)
    y = torch.tensor(y_np, dtype=torch.float32)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(FEATURES, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    print(f"rank {rank}/{world_size}: torch DDP (gloo) on {len(y)} samples, master {addr}:{port}", flush=True)
    loss_value = float("nan")
    for epoch in range(1, args.epochs + 1):
        optimizer.zero_grad()
        loss = loss_fn(model(x).squeeze(1), y)
        loss.backward()
        optimizer.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        loss_value = float(global_loss) / world_size
        print(f"epoch {epoch} loss {loss_value:.4f}", flush=True)
        time.sleep(args.step_delay)
    dist.destroy_process_group()
    linear = model.module
    weights = linear.weight.detach().numpy().reshape(-1).astype(np.float64)
    return loss_value, (weights, float(linear.bias.detach()))


def torch_available() -> bool:
    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        return False
    return True


def rendezvous(env: Mapping[str, str]) -> tuple[int, int, str, int]:
    """(rank, world size, master address, master port) as a PyTorchJob sets them (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT), else as a Trainer v2 TrainJob's torch runtime does for torchrun (PET_NODE_RANK,
    PET_NNODES, PET_MASTER_ADDR, PET_MASTER_PORT), with one process per node as torchrun would start."""
    if "RANK" not in env and "PET_NODE_RANK" in env:
        return (
            int(env["PET_NODE_RANK"]),
            int(env.get("PET_NNODES", "1")),
            env.get("PET_MASTER_ADDR", "127.0.0.1"),
            int(env.get("PET_MASTER_PORT", "29500")),
        )
    return (
        int(env.get("RANK", "0")),
        int(env.get("WORLD_SIZE", "1")),
        env.get("MASTER_ADDR", "127.0.0.1"),
        int(env.get("MASTER_PORT", "23456")),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--step-delay", type=float, default=0.05, help="seconds between steps, to watch live")
    parser.add_argument("--backend", choices=["auto", "numpy", "torch"], default="auto")
    parser.add_argument("--data", help="a snapshot (.npz with x, y) to train on instead of synthetic data")
    parser.add_argument("--val-fraction", type=float, default=0.2, help="tail of the data held out")
    parser.add_argument("--metrics-out", help="rank 0 writes the final metrics here (JSON)")
    parser.add_argument("--model-out", help="rank 0 writes the trained weights here (JSON)")
    parser.add_argument("--baseline-model", help="weights (JSON) to score on the same data, if present")
    parser.add_argument("--make-data", metavar="PATH", help="write a synthetic snapshot (.npz) and exit")
    args = parser.parse_args(argv)
    if args.make_data:
        write_snapshot(args.make_data, *make_data(args.samples, args.seed))
        print(f"wrote {args.samples} samples (seed {args.seed}) to {args.make_data}", flush=True)
        return 0

    rank, world_size, addr, port = rendezvous(os.environ)
    use_torch = args.backend == "torch" or (args.backend == "auto" and torch_available())
    train = train_torch if use_torch else train_numpy
    train_set, val_set = load_data(args)
    final_loss, (weights, bias) = train(args, train_set, rank, world_size, addr, port)
    print(f"rank {rank} done: final loss {final_loss:.4f}", flush=True)
    if rank == 0:
        metrics = {
            "loss": final_loss,
            **evaluate(weights, bias, val_set),
            "epochs": args.epochs,
            "lr": args.lr,
            "world_size": world_size,
            "backend": "torch" if use_torch else "numpy",
            "data": args.data,
            **baseline_metrics(args.baseline_model, val_set),
        }
        print(f"validation loss {metrics['val_loss']:.4f} accuracy {metrics['val_accuracy']:.3f}", flush=True)
        write_json(args.metrics_out, metrics)
        write_json(args.model_out, {"weights": weights.tolist(), "bias": bias})
    return 0


def baseline_metrics(path: str | None, val_set: Data) -> dict[str, float]:
    """``baseline_val_loss`` / ``baseline_val_accuracy`` of the model at ``path``; nothing if it is absent."""
    if not path or not Path(path).exists():
        return {}
    model = json.loads(Path(path).read_text())
    scores = evaluate(np.asarray(model["weights"], dtype=np.float64), float(model["bias"]), val_set)
    return {f"baseline_{key}": value for key, value in scores.items()}


def write_snapshot(path: str, x: np.ndarray, y: np.ndarray) -> None:
    """Write atomically, so a sensor never sees half a snapshot."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.stem}.partial.npz")
    np.savez(partial, x=x, y=y)
    partial.replace(target)


def write_json(path: str | None, value: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(value, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
