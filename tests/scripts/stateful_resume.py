"""An unmodified script that checkpoints a torchdata StatefulDataLoader mid-epoch and resumes it, for ``collector run``.

usage: stateful_resume.py WORKERS...
For each worker count: two batches, state_dict(), then a fresh loader restored
from it to the epoch's end; prints the worker count and every batch it trained on.
"""

from __future__ import annotations

import sys

import torch
from torchdata.stateful_dataloader import StatefulDataLoader


def resume(workers: int) -> list[list[float]]:
    data = torch.arange(16.0)
    first = StatefulDataLoader(data, batch_size=4, num_workers=workers)
    batches = iter(first)
    seen = [next(batches).tolist() for _ in range(2)]
    state = first.state_dict()
    second = StatefulDataLoader(data, batch_size=4, num_workers=workers)
    second.load_state_dict(state)
    return seen + [batch.tolist() for batch in second]


def main() -> None:
    for workers in map(int, sys.argv[1:]):
        print(workers, resume(workers))


if __name__ == "__main__":
    main()
