"""What a prediction, a trial or a sweep is for: a DataLoader's settings and torch's intra-op threads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    """What a prediction is for: the DataLoader's settings and torch's intra-op threads."""

    num_workers: int
    threads: int  # torch.set_num_threads
    prefetch_factor: int | None = 2  # batches in flight per worker (None without workers: DataLoader refuses one)
    persistent_workers: bool = False
    pin_memory: bool = False
    batch_size: int | None = None  # None: the loader's own (only a sweep changes it)

    def changed(self, other: Setting) -> dict[str, Any]:
        """The fields of ``other`` that differ from this setting's, by parameter name, in a fixed order."""
        names = {"threads": "torch.set_num_threads"}
        needs_workers = ("prefetch_factor", "persistent_workers")  # left at their defaults without workers
        return {
            names.get(f.name, f.name): getattr(other, f.name)
            for f in dataclasses.fields(self)
            if _effective(self, f.name) != _effective(other, f.name)
            and not (other.num_workers == 0 and f.name in needs_workers)
        }

    def but(self, **changes: Any) -> Setting:
        """This setting with ``changes``; settings that need workers go back to their defaults without them."""
        new = dataclasses.replace(self, **changes)
        if new.num_workers == 0:
            return dataclasses.replace(new, prefetch_factor=None, persistent_workers=False)
        return new if new.prefetch_factor is not None else dataclasses.replace(new, prefetch_factor=2)

    @property
    def depth(self) -> int:
        """Batches the workers may hold in flight."""
        return self.num_workers * (self.prefetch_factor or 0)


def stored(setting: Setting) -> dict[str, Any]:
    """The setting's fields by name, ``batch_size`` only where set: the stored form files before it also hold."""
    return {k: v for k, v in dataclasses.asdict(setting).items() if not (k == "batch_size" and v is None)}


def _effective(setting: Setting, name: str) -> Any:
    """A field as DataLoader applies it: no prefetch_factor (no workers) and the default 2 queue alike."""
    value = getattr(setting, name)
    return 2 if name == "prefetch_factor" and value is None else value
