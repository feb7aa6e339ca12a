"""Shared by the framework scripts: a synthetic dataset that names its items, and the result line each rank prints."""

from __future__ import annotations

import json
import os
import time

import torch
from torch.utils.data import Dataset


class Items(Dataset):  # type: ignore[type-arg]
    """Item i: (i, x, y) with x from a generator seeded by i, so every rank and mode sees the same data.

    ``cost_s`` sleeps per item (a slow loader); ``slow_rank`` multiplies it by 3 on that rank.
    """

    def __init__(self, n: int, cost_s: float = 0.0, slow_rank: int | None = None) -> None:
        self.n = n
        rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))
        self.cost_s = cost_s * (3 if slow_rank is not None and rank == slow_rank else 1)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.cost_s:
            time.sleep(self.cost_s)
        x = torch.randn(8, generator=torch.Generator().manual_seed(i))
        return {"idx": torch.tensor(i), "x": x, "y": x.sum(dim=0, keepdim=True)}


def result(mode: str, rank: int, model: torch.nn.Module, seen: list[int], **extra: object) -> None:
    """One JSON line per rank and mode: the weights' checksum stands for the whole training result."""
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    line = {"mode": mode, "rank": rank, "weights": [float(w) for w in weights], "seen": sorted(seen), **extra}
    print("RESULT " + json.dumps(line), flush=True)
