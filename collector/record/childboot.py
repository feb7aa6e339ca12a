"""``collector run`` in the Python processes a script starts: each records its own DataLoaders too."""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Callable, Mapping, MutableMapping
from types import ModuleType
from typing import Any

# NOTE [ Child processes ]
# Lightning's DDP launcher re-executes the script for ranks 1..N-1 with
# `python script.py`, torch.multiprocessing.spawn starts fresh interpreters,
# torchrun too: none of them runs `collector run`. So `collector run` puts
# collector/record/_child_path first on PYTHONPATH and its settings in
# $STALLWATCH_AUTOWATCH. Every Python the script starts then imports that
# folder's sitecustomize.py, which calls boot(): it patches DataLoader the
# moment torch.utils.data.dataloader is imported (a one-shot import hook, so
# a child that never imports torch pays nothing more) and flushes the runs
# at exit. The sitecustomize it shadows, if any, runs after it. The writer
# process starts with `python -I`, which ignores both.
# Only the script's own Python is touched: the settings name its prefix
# (sys.prefix: a virtualenv has its own, although its binary links to the
# base interpreter's) and its version. A child of the same interpreter
# (DDP ranks, torchrun, spawn) adds the folder holding collector/ to the end
# of its path where it cannot import it, and records. Any other Python (a
# tool from another virtualenv the script starts) takes our folder off its
# path, and PYTHONPATH and $STALLWATCH_AUTOWATCH back to what they were for
# its own children, before anything else runs: it imports nothing of ours
# but that one file, and runs the sitecustomize it would have run anyway.
ENV = "STALLWATCH_AUTOWATCH"
CHILD_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child_path")
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = "torch.utils.data.dataloader"


def child_environment(
    db: str,
    gpu_hz: float,
    host_hz: float,
    tags: Mapping[str, Any],
    environ: Mapping[str, str],
    keep_batches: int | None = None,
    tune: int | None = None,
) -> dict[str, str]:
    """The variables that make every Python child record like this process (see NOTE [ Child processes ])."""
    before = environ.get("PYTHONPATH")
    path = [CHILD_PATH, *filter(None, (before or "").split(os.pathsep))]
    settings = {"db": db, "gpu_hz": gpu_hz, "host_hz": host_hz, "tags": dict(tags), "keep_batches": keep_batches}
    settings["tune"] = tune
    settings["python"] = interpreter()
    settings["package_root"], settings["pythonpath"] = PACKAGE_ROOT, before
    return {ENV: json.dumps(settings, default=str), "PYTHONPATH": os.pathsep.join(path)}


def interpreter() -> list[str]:
    """What makes a Python the script's own (NOTE [ Child processes ]): its prefix and its version."""
    return [os.path.realpath(sys.prefix), f"{sys.version_info[0]}.{sys.version_info[1]}"]


def set_environment(updates: Mapping[str, str], environ: MutableMapping[str, str] = os.environ) -> Callable[[], None]:
    """Apply ``updates``; returns the function that puts the previous values back."""
    saved = {key: environ.get(key) for key in updates}
    environ.update(updates)

    def restore() -> None:
        for key, value in saved.items():
            if value is None:
                environ.pop(key, None)
            else:
                environ[key] = value

    return restore


def boot(environ: Mapping[str, str] = os.environ) -> None:
    """In a child of ``collector run``: record its DataLoaders once torch's is imported."""
    settings = json.loads(environ[ENV])

    def start(module: ModuleType) -> None:
        from collector.record.autowatch import AutoWatch
        from collector.sample.sampler import Rates

        rates = Rates(
            gpu_hz=float(settings["gpu_hz"]),
            host_hz=float(settings["host_hz"]),
            keep_batches=settings.get("keep_batches"),
        )
        # the class from the module just executed: torch.utils.data itself is still being imported
        auto = AutoWatch(
            settings["db"],
            rates,
            tags=settings.get("tags") or {},
            loader_class=module.DataLoader,
            tune=settings.get("tune"),
        )
        auto.install()
        atexit.register(auto.close)

    if TARGET in sys.modules:
        start(sys.modules[TARGET])
    else:
        sys.meta_path.insert(0, _AfterImport(TARGET, start))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of one module so ``then`` runs once it has executed."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # one shot
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if find is None else find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Then(spec.loader, self.then)
                return spec
        return None


class _Then(importlib.abc.Loader):
    def __init__(self, loader: Any, then: Callable[[ModuleType], None]) -> None:
        self._loader, self._then = loader, then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        try:
            self._then(module)
        except Exception as exc:  # noqa: BLE001 - the child must run on, unrecorded
            sys.stderr.write(f"stallwatch: not recording this process: {type(exc).__name__}: {exc}\n")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)  # get_source, get_resource_reader, ...
