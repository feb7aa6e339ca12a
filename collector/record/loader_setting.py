"""A DataLoader's setting read and changed between epochs: the four loader fields and torch's threads."""

from __future__ import annotations

import sys
from typing import Any

from collector.tune.policy import Setting


def setting_of(loader: Any) -> Setting:
    """The loader's setting now, and torch's intra-op threads."""
    torch = sys.modules.get("torch")
    threads = int(torch.get_num_threads()) if torch is not None else 1
    workers = int(getattr(loader, "num_workers", 0) or 0)
    return Setting(
        num_workers=workers,
        threads=threads,
        prefetch_factor=getattr(loader, "prefetch_factor", None) if workers else None,
        persistent_workers=bool(getattr(loader, "persistent_workers", False)),
        pin_memory=bool(getattr(loader, "pin_memory", False)),
    ).but()


def apply(loader: Any, setting: Setting, threads: bool = True) -> None:
    """Put a DataLoader at ``setting`` between epochs: its workers ended where they would keep the old one.

    Only the four loader fields and torch's threads change; the user's
    sampler, generator, worker_init_fn, collate_fn and multiprocessing
    context stay as they are. Persistent workers of another setting are
    shut down first (DataLoader itself keeps them across iter()). ``threads``
    False: torch's threads stay as they are (another loader of the job owns
    them: NOTE [ One tuner for the job ]).
    """
    target = target_of(loader)
    now = setting_of(target)
    if threads and now.threads != setting.threads:
        sys.modules["torch"].set_num_threads(setting.threads)
    if now.but(threads=setting.threads) == setting:
        return
    iterator = target.__dict__.get("_iterator")
    if iterator is not None:
        target.__dict__["_iterator"] = None
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
    values = {
        "num_workers": setting.num_workers,
        "prefetch_factor": setting.prefetch_factor if setting.num_workers else None,
        "persistent_workers": setting.persistent_workers and setting.num_workers > 0,
        "pin_memory": setting.pin_memory,
    }
    target.__dict__.update(values)  # past DataLoader.__setattr__, which refuses persistent_workers after __init__


def target_of(loader: Any) -> Any:
    """The DataLoader itself behind a session's weak stand-in (NOTE [ Weak loader ])."""
    unwrap = getattr(type(loader), "_target", None)
    return unwrap(loader) if unwrap is not None else loader


def unwatched_by_sigchld(iterator: Any) -> None:
    """An iterator's workers off torch's SIGCHLD watch: a dead one raises inside next(), not at any line.

    torch registers each multi-process iterator's worker pids with a SIGCHLD
    handler that raises a dead worker's error in the main thread wherever it
    is; the iterator's own queue wait finds a dead worker too (every
    MP_STATUS_CHECK_INTERVAL, 5 s) and raises it from next(). NOTE [ Trials never hurt ].
    """
    if not getattr(iterator, "_worker_pids_set", False):
        return
    try:
        sys.modules["torch"].utils.data._utils.signal_handling._remove_worker_pids(id(iterator))
    except (AttributeError, ValueError, RuntimeError):
        return  # another torch: its watch stays
    iterator._worker_pids_set = False


def watched_by_sigchld(iterator: Any) -> None:
    """A kept trial's persistent workers back on torch's SIGCHLD watch, as the user's own would be."""
    if iterator is None or getattr(iterator, "_worker_pids_set", True) or not getattr(iterator, "_workers", None):
        return
    try:
        pids = tuple(w.pid for w in iterator._workers)
        sys.modules["torch"].utils.data._utils.signal_handling._set_worker_pids(id(iterator), pids)
    except (AttributeError, ValueError, RuntimeError):
        return
    iterator._worker_pids_set = True
