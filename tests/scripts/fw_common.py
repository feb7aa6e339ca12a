"""Shared by the framework scripts: a synthetic dataset that names its items, and the result line each rank prints."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import torch
from torch.utils.data import Dataset


class Items(Dataset):  # type: ignore[type-arg]
    """Item i: (i, x, y) with x from a generator seeded by i, so every rank and mode sees the same data.

    ``cost_s`` sleeps per item: a loader slow to produce it.
    """

    def __init__(self, n: int, cost_s: float = 0.0) -> None:
        self.n, self.cost_s = n, cost_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.cost_s:
            time.sleep(self.cost_s)
        x = torch.randn(8, generator=torch.Generator().manual_seed(i))
        return {"idx": torch.tensor(i), "x": x, "y": x.sum(dim=0, keepdim=True)}


def result(mode: str, rank: int, model: torch.nn.Module, seen: list[int], loss: float) -> None:
    """One short JSON line per rank and mode: the final loss, and a hash of every weight bit for the whole result."""
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    digest = hashlib.sha1(weights.numpy().tobytes()).hexdigest()
    line = {"mode": mode, "rank": rank, "loss": loss, "weights": digest, "seen": sorted(seen)}
    sys.stdout.flush()
    os.write(1, f"RESULT {json.dumps(line)}\n".encode())  # one write under PIPE_BUF: ranks' lines stay whole
