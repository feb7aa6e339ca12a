"""What a run records about itself once: loader configuration, versions, rank."""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from collector.version import __version__

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
    batch_sampler = getattr(loader, "batch_sampler", None)
    config["sampler"] = None if sampler is None else type(sampler).__name__
    config["batch_sampler"] = None if batch_sampler is None else type(batch_sampler).__name__
    config["iterable_dataset"] = getattr(loader, "_dataset_kind", None) == 1  # torch's _DatasetKind.Iterable
    own_batches = batch_sampler is not None and config["batch_size"] is None  # batch_sampler=... was passed
    config["shuffle"] = _shuffled(sampler, own_batches, config["iterable_dataset"])
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
    config["resumed"] = resumes(loader)
    config["grad_enabled"] = _grad_enabled()
    try:
        config["batches_per_epoch"] = len(loader)
    except TypeError:
        config["batches_per_epoch"] = None
    return config


def _grad_enabled() -> bool | None:
    """Whether autograd is on where the loop called iter(): False under ``torch.no_grad()`` (an evaluation loop)."""
    torch = sys.modules.get("torch")
    is_enabled = getattr(torch, "is_grad_enabled", None)
    return bool(is_enabled()) if callable(is_enabled) else None


# NOTE [ Resumed runs ]
# torchdata's StatefulDataLoader and torchdata.nodes.Loader keep the state
# given to load_state_dict() until their next iter(), which starts from it,
# mid-epoch. A run whose first epoch starts so is stored with
# config.resumed = true (``report`` says so); any later epoch that resumes
# adds a note to the run's warnings. Its batches are numbered from 0 at the
# resume point: the epoch's first batches are the loader's restart, not the
# data's start.
_SAVED_STATE = ("next_iter_state", "_next_iter_state_dict")  # StatefulDataLoader, torchdata.nodes.Loader


def resumes(loader: Any) -> bool:
    """Whether the loader's next iter() resumes from a state_dict given to load_state_dict (NOTE [ Resumed runs ])."""
    try:
        return any(getattr(loader, name, None) is not None for name in _SAVED_STATE)
    except ReferenceError:  # a weak stand-in whose loader is gone
        return False


def _shuffled(sampler: Any, own_batches: bool, iterable: bool) -> bool | None:
    """Whether the loader visits the data in a random order; None where no DataLoader argument decides it.

    An IterableDataset streams in its own order and a batch_sampler the user
    passes picks its own indices (the DataLoader's batch_size is then None):
    ``shuffle=True`` would raise ValueError beside either. A DistributedSampler
    carries its own ``shuffle``.
    """
    if sampler is None or iterable or own_batches:
        return None
    kind = type(sampler).__name__
    if kind == "RandomSampler":
        return True
    if kind == "SequentialSampler":
        return False
    shuffle = getattr(sampler, "shuffle", None)  # DistributedSampler and its look-alikes
    return shuffle if isinstance(shuffle, bool) else None


def versions() -> dict[str, Any]:
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


# NOTE [ Job id ]
# The ranks of one distributed job share runs.job_id, read from the launcher's
# environment: torchrun's TORCHELASTIC_RUN_ID (its default "none" names no
# job), else MASTER_ADDR:MASTER_PORT@START. START is $STALLWATCH_JOB_STARTED
# where set (`collector run` and the callbacks export it before any rank is
# launched, so every rank inherits it), else the start time of the launcher:
# the oldest ancestor running the same Python (torchrun, the
# torch.multiprocessing.spawn parent, the rank 0 that Lightning's launcher
# re-executes the script from). One process outside any job has no job id.
JOB_STARTED_ENV = "STALLWATCH_JOB_STARTED"


def job_id(
    environ: Mapping[str, str] = os.environ, launcher_started_at: Callable[[], float | None] | None = None
) -> str | None:
    """The id every rank of this process's distributed job computes alike, or None. See NOTE [ Job id ]."""
    elastic = environ.get("TORCHELASTIC_RUN_ID")
    if elastic and elastic != "none":
        return elastic
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    if not addr or not port:
        return None
    started = environ.get(JOB_STARTED_ENV)
    if not started:
        if launcher_started_at is None:
            from collector.sample import host

            launcher_started_at = host.launcher_started_at
        at = launcher_started_at()
        started = "unknown" if at is None else f"{at:.0f}"
    return f"{addr}:{port}@{started}"


def job_start(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variable to export so every rank launched from here shares this moment as the job's start.

    Empty where one is inherited, or where this process is already a rank
    (torchrun's, say): its siblings started elsewhere, so the launcher's start
    time stands instead.
    """
    if JOB_STARTED_ENV in environ or "MASTER_PORT" in environ or "RANK" in environ:
        return {}
    return {JOB_STARTED_ENV: f"{time.time():.0f}"}


def command_line() -> str:
    return " ".join([os.path.basename(sys.executable), *sys.argv])


def torch_threads() -> tuple[int, int] | None:
    """(intra-op, inter-op) threads of torch in this process, if torch is imported; recorded each epoch."""
    torch = sys.modules.get("torch")
    try:
        return int(torch.get_num_threads()), int(torch.get_num_interop_threads())  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - no torch, or one without these
        return None
