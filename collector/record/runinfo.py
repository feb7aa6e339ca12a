"""What a run records about itself once: loader configuration, versions, rank."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

WORDS = [
    "amber",
    "brisk",
    "calm",
    "dusty",
    "eager",
    "fleet",
    "gentle",
    "hazy",
    "ivory",
    "jolly",
    "keen",
    "lucid",
    "mellow",
    "noble",
    "olive",
    "proud",
    "quiet",
    "rapid",
    "sunny",
    "tidy",
    "vivid",
    "witty",
]
NOUNS = [
    "badger",
    "comet",
    "delta",
    "ember",
    "falcon",
    "glacier",
    "harbor",
    "island",
    "jaguar",
    "kestrel",
    "lagoon",
    "meadow",
    "nebula",
    "otter",
    "pepper",
    "quartz",
    "river",
    "summit",
    "tundra",
    "walnut",
]


def generated_name(seed: int) -> str:
    """A readable run name such as ``brisk-otter-0412``."""
    return f"{WORDS[seed % len(WORDS)]}-{NOUNS[(seed // 7) % len(NOUNS)]}-{seed % 10_000:04d}"


def loader_config(loader: Any) -> dict[str, Any]:
    """The DataLoader settings the diagnosis reasons about; NULL for a plain iterable."""
    keys = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "drop_last", "timeout")
    config: dict[str, Any] = {key: getattr(loader, key, None) for key in keys}
    sampler = getattr(loader, "sampler", None)
    config["sampler"] = None if sampler is None else type(sampler).__name__
    config["shuffle"] = None if sampler is None else type(sampler).__name__ == "RandomSampler"
    context = getattr(loader, "multiprocessing_context", None)
    if context is not None and not isinstance(context, str):
        context = context.get_start_method()
    if context is None and config.get("num_workers"):
        import multiprocessing

        context = multiprocessing.get_start_method(allow_none=True) or "default"
    config["multiprocessing_context"] = context
    dataset = getattr(loader, "dataset", None)
    config["dataset"] = None if dataset is None else type(dataset).__name__
    try:
        config["dataset_len"] = None if dataset is None else len(dataset)
    except TypeError:
        config["dataset_len"] = None
    config["loader"] = type(loader).__name__
    try:
        config["batches_per_epoch"] = len(loader)
    except TypeError:
        config["batches_per_epoch"] = None
    return config


def versions() -> dict[str, Any]:
    from collector import __version__

    torch_version = None
    if "torch" in sys.modules:
        torch_version = getattr(sys.modules["torch"], "__version__", None)
    return {"python": platform.python_version(), "torch": torch_version, "stallwatch": __version__}


def distributed() -> tuple[int | None, int | None]:
    """(rank, world_size) from torch.distributed, else from its environment variables."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except (RuntimeError, ValueError):
        pass
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None and rank.isdigit() and world is not None and world.isdigit():
        return int(rank), int(world)
    return None, None


def command_line() -> str:
    return " ".join([os.path.basename(sys.executable), *sys.argv])
