"""A plain PyTorch loop, one process or DDP over torch.multiprocessing.spawn (gloo): a RESULT line per mode and rank.

``fw_plain.py DB WORLD MODE[,MODE...] [cost_ms=C] [slow_rank=R] [items=N]``. Modes:
``none`` and ``watch`` (collector.watch on the loader). Each item sleeps C ms,
3x that on rank R (a straggler); each step sleeps 2 ms, like GPU compute.
"""

from __future__ import annotations

import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from fw_common import Items, result
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

import collector

DB, WORLD, MODES = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
OPTS = dict(a.split("=") for a in sys.argv[4:])
COST_S = float(OPTS.get("cost_ms", "0")) / 1000
SLOW = int(OPTS["slow_rank"]) if "slow_rank" in OPTS else None
ITEMS = int(OPTS.get("items", "64"))


def train(rank: int, mode: str) -> None:
    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Linear(8, 1)
    dataset = Items(ITEMS, COST_S * (3 if rank == SLOW else 1))
    sampler = DistributedSampler(dataset, num_replicas=WORLD, rank=rank, shuffle=True, seed=0) if WORLD > 1 else None
    loader = DataLoader(dataset, batch_size=4, sampler=sampler, shuffle=sampler is None)
    if mode == "watch":
        loader = collector.watch(loader, db=DB, run="plain-train", gpu_hz=0, host_hz=0)
    if WORLD > 1:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    seen: list[int] = []
    loss = torch.tensor(float("nan"))
    for epoch in range(2):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for batch in loader:
            seen += batch["idx"].tolist()
            loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if COST_S:
                time.sleep(0.002)  # the step's compute
    if mode == "watch":
        loader.close()  # type: ignore[attr-defined]
    result(mode, rank, model, seen, float(loss.detach()))


def rank_main(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    for mode in MODES:
        train(rank, mode)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    if WORLD == 1:
        for mode in MODES:
            train(0, mode)
    else:
        port = free_port()
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        mp.spawn(rank_main, args=(port,), nprocs=WORLD)
