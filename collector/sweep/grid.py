"""The settings a sweep may try (the grid the user narrows) and how a sweep passes, prints and stores one.

A setting is the report's and the tuner's own (collector/diagnosis/setting.py); a sweep does not vary
torch's threads, so each of its settings holds the process's, and its stored rows name none.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field, replace
from typing import Any

from collector.diagnosis.setting import Setting

DEFAULT_PREFETCH = (2, 4)


def sweep_setting(
    num_workers: int,
    prefetch_factor: int | None = None,
    pin_memory: bool = False,
    persistent_workers: bool = False,
    batch_size: int | None = None,
    *,
    threads: int,
) -> Setting:
    """One trial's setting; without workers DataLoader takes no prefetch_factor and no persistent_workers."""
    if num_workers == 0 and (prefetch_factor is not None or persistent_workers):
        raise ValueError("num_workers=0 takes no prefetch_factor and no persistent_workers: pass None and False")
    return Setting(num_workers, threads, prefetch_factor, persistent_workers, pin_memory, batch_size)


def factory_kwargs(setting: Setting) -> dict[str, Any]:
    """What the factory is called with; batch_size only when the sweep sets it (threads are the process's)."""
    out: dict[str, Any] = {
        "num_workers": setting.num_workers,
        "prefetch_factor": setting.prefetch_factor,
        "pin_memory": setting.pin_memory,
        "persistent_workers": setting.persistent_workers,
    }
    if setting.batch_size is not None:
        out["batch_size"] = setting.batch_size
    return out


def code(setting: Setting) -> str:
    """The setting as a line to paste: ``DataLoader(..., num_workers=4, prefetch_factor=2, ...)``."""
    args = [f"num_workers={setting.num_workers}"]
    if setting.batch_size is not None:
        args.insert(0, f"batch_size={setting.batch_size}")
    if setting.num_workers:
        args += [f"prefetch_factor={setting.prefetch_factor}", f"persistent_workers={setting.persistent_workers}"]
    args.append(f"pin_memory={setting.pin_memory}")
    return f"DataLoader(..., {', '.join(args)})"


def to_row(setting: Setting) -> dict[str, Any]:
    """The setting as a sweep's run tags store it (``trial``): no threads, which a sweep does not vary."""
    return {
        "num_workers": setting.num_workers,
        "prefetch_factor": setting.prefetch_factor,
        "pin_memory": setting.pin_memory,
        "persistent_workers": setting.persistent_workers,
        "batch_size": setting.batch_size,
    }


def from_row(data: dict[str, Any], *, threads: int) -> Setting:
    """A setting back from a sweep's tags or rows, at ``threads`` (the rows keep none)."""
    workers = int(data["num_workers"])
    return sweep_setting(
        workers,
        prefetch_factor=_int_or_none(data.get("prefetch_factor")) if workers else None,
        pin_memory=bool(data.get("pin_memory", False)),
        persistent_workers=bool(data.get("persistent_workers", False)) if workers else False,
        batch_size=_int_or_none(data.get("batch_size")),
        threads=threads,
    )


def process_threads() -> int:
    """torch's intra-op threads in this process: what every trial of a sweep runs at."""
    import torch

    return int(torch.get_num_threads())


@dataclass(frozen=True)
class Grid:
    """The values each setting may take. Axis order is the order the planner explores."""

    workers: tuple[int, ...]
    prefetch: tuple[int, ...] = DEFAULT_PREFETCH
    pin_memory: tuple[bool, ...] = (False,)
    persistent_workers: tuple[bool, ...] = (False, True)
    batch_size: tuple[int | None, ...] = (None,)
    threads: int = field(default_factory=process_threads)  # torch's, at the sweep's start: not an axis

    def __post_init__(self) -> None:
        for name in ("workers", "prefetch", "pin_memory", "persistent_workers", "batch_size"):
            if not getattr(self, name):
                raise ValueError(f"the grid needs at least one value for {name}")
        if any(w < 0 for w in self.workers):
            raise ValueError(f"num_workers must be >= 0, got {list(self.workers)}")
        if any(p < 1 for p in self.prefetch):
            raise ValueError(f"prefetch_factor must be >= 1, got {list(self.prefetch)}")
        if any(b is not None and b < 1 for b in self.batch_size):
            raise ValueError(f"batch_size must be >= 1, got {list(self.batch_size)}")
        object.__setattr__(self, "workers", tuple(sorted(set(self.workers))))

    def defaults(self) -> tuple[int, bool]:
        """(prefetch_factor, persistent_workers) to start from: DataLoader's own where the grid holds them."""
        prefetch = 2 if 2 in self.prefetch else self.prefetch[0]
        persistent = False if False in self.persistent_workers else self.persistent_workers[0]
        return prefetch, persistent

    def with_workers(self, setting: Setting, workers: int) -> Setting:
        """``setting`` with another worker count; leaving 0 workers restores the default prefetch."""
        if workers == 0:
            return replace(setting, num_workers=0, prefetch_factor=None, persistent_workers=False)
        if setting.num_workers == 0:
            prefetch, persistent = self.defaults()
            return replace(setting, num_workers=workers, prefetch_factor=prefetch, persistent_workers=persistent)
        return replace(setting, num_workers=workers)

    def base(self) -> Setting:
        """Where the sweep starts: the fewest workers, every other setting at its default."""
        start = self.setting(0, None, self.pin_memory[0], False, self.batch_size[0])
        return self.with_workers(start, self.workers[0])

    def settings(self) -> list[Setting]:
        """Every distinct setting on the grid (num_workers=0 collapses prefetch and persistence)."""
        seen: dict[Setting, None] = {}
        for w, p, pin, pers, b in itertools.product(
            self.workers, self.prefetch, self.pin_memory, self.persistent_workers, self.batch_size
        ):
            seen[self.setting(w, p, pin, pers, b) if w else self.setting(0, None, pin, False, b)] = None
        return list(seen)

    def setting(
        self,
        num_workers: int,
        prefetch_factor: int | None = None,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        batch_size: int | None = None,
    ) -> Setting:
        """``sweep_setting`` at this grid's threads."""
        return sweep_setting(
            num_workers, prefetch_factor, pin_memory, persistent_workers, batch_size, threads=self.threads
        )


def _int_or_none(value: Any) -> int | None:
    """JSON or a DataFrame may hand back 2.0 or NaN for 2 or None."""
    if value is None or value != value:  # NaN is the one value not equal to itself
        return None
    return int(value)


def default_workers(cores: int | None = None) -> tuple[int, ...]:
    """0, 1, 2, 4, ... up to twice the usable cores (more than cores can hide I/O latency)."""
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
    top = min(2 * max(cores, 1), 64)
    values = {0, 1, cores}
    w = 2
    while w <= top:
        values.add(w)
        w *= 2
    return tuple(sorted(v for v in values if v <= top))


def parse_ints(text: str, name: str) -> tuple[int, ...]:
    """``"0,2,4"`` -> (0, 2, 4); a one-line error naming the flag otherwise."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{name} takes whole numbers separated by commas, e.g. 0,2,4; got {text!r}") from None
    if not values:
        raise ValueError(f"{name} needs at least one value, e.g. 0,2,4")
    return values


def parse_bools(text: str, name: str) -> tuple[bool, ...]:
    """``"false,true"`` -> (False, True); accepts true/false, on/off, yes/no, 1/0."""
    truth = {"true": True, "on": True, "yes": True, "1": True, "false": False, "off": False, "no": False, "0": False}
    out = []
    for part in text.split(","):
        key = part.strip().lower()
        if key not in truth:
            raise ValueError(f"{name} takes true/false values separated by commas, e.g. false,true; got {text!r}")
        out.append(truth[key])
    return tuple(dict.fromkeys(out))
