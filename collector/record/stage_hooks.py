"""The hooks that time a worker's stages: torchvision's Compose, PIL's open and decode, collate, the hand-over."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from collector.record.stage_clock import HANDOVER, REPLAY_FILES, StageClock, pixels

# NOTE [ Stage hooks ]
# The hooks go in only where this process is ours to change: a DataLoader
# worker, whose classes no one else uses, from its init_fn (WorkerHook).
# Each replaces a class attribute or module function with one that calls the
# original untouched unless the clock times this fetch (StageClock.active),
# so untimed fetches pay one attribute test a hooked call, and every
# argument, result and exception passes as it is:
# - torchvision.transforms.Compose.__call__ and transforms.v2.Compose.forward:
#   the same loop as torchvision 0.15-0.29's, each step timed as
#   "transform <position> <class>", its image's pixels before and after. A
#   Compose inside a timed one counts in its parent's step.
# - PIL.Image.open ("PIL open"; the first REPLAY_FILES paths a worker opens
#   are kept as rows "file <path>", for replaying their decode) and PIL.ImageFile.ImageFile.load when it has
#   tiles left to decode ("PIL decode <format>", its decoded pixels: after a
#   draft() the reduced size).
# - the fetcher's collate_fn ("collate").
# - the worker's queue feeder (multiprocessing.queues._ForkingPickler.dumps:
#   the batch pickled, its tensors moved into shared memory) as HANDOVER,
#   timed for as many batches as fetches were timed.
# Only modules the worker already imported are hooked: nothing is imported
# for this, and a dataset without torchvision or PIL gets the stack sampler's
# table (NOTE [ Stack sampling ]).

_installed: StageClock | None = None
_waiting: list[Callable[[StageClock], bool]] = []  # hooks whose module this process has not imported yet
RETRY_FETCHES = 8  # timed fetches after which a module still not imported is given up on


def install(clock: StageClock) -> None:
    """Hook this process's Compose, PIL and queue feeder to ``clock`` (once a process).

    A module a dataset imports only in its first ``__getitem__`` (PIL, under spawn) is hooked when a
    later timed fetch ends, for the first RETRY_FETCHES of them.
    """
    global _installed
    if _installed is not None:
        return
    _installed = clock
    _waiting[:] = [_hook_compose, _hook_compose_v2, _hook_pil, _hook_handover]
    retry(clock)
    if _waiting:
        clock.retry, clock.retries = retry, RETRY_FETCHES


def retry(clock: StageClock) -> None:
    """Install the hooks whose module is imported by now."""
    for hook in list(_waiting):
        try:
            if hook(clock):
                _waiting.remove(hook)
        except (ImportError, AttributeError, TypeError):
            _waiting.remove(hook)


def timed(clock: StageClock, stage: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, timed as ``stage`` in timed fetches."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if not clock.active:
            return function(*args, **kwargs)
        clock.enter()
        try:
            return function(*args, **kwargs)
        finally:
            clock.leave(stage)

    call._stallwatch_inner = function  # type: ignore[attr-defined]
    return call


def _hook_compose(clock: StageClock) -> bool:
    module = sys.modules.get("torchvision.transforms.transforms")
    if module is None:
        return False
    compose = module.Compose
    original = compose.__call__

    def __call__(self: Any, img: Any) -> Any:
        if not clock.active or clock.in_compose:
            return original(self, img)
        clock.in_compose = True
        try:
            for position, transform in enumerate(self.transforms):
                before = pixels(img)
                clock.enter()
                try:
                    img = transform(img)
                finally:
                    clock.leave(_step(position, transform), before, pixels(img))
            return img
        finally:
            clock.in_compose = False

    compose.__call__ = __call__
    return True


def _hook_compose_v2(clock: StageClock) -> bool:
    module = sys.modules.get("torchvision.transforms.v2._container")
    if module is None:
        return False
    compose = module.Compose
    original = compose.forward

    def forward(self: Any, *inputs: Any) -> Any:
        if not clock.active or clock.in_compose:
            return original(self, *inputs)
        clock.in_compose = True
        try:
            needs_unpacking = len(inputs) > 1
            for position, transform in enumerate(self.transforms):
                before = pixels(inputs[0]) if inputs else None
                clock.enter()
                try:
                    outputs = transform(*inputs)
                finally:
                    clock.leave(_step(position, transform), before, None)
                inputs = outputs if needs_unpacking else (outputs,)
            return outputs
        finally:
            clock.in_compose = False

    compose.forward = forward
    return True


def _step(position: int, transform: Any) -> str:
    return f"transform {position} {type(transform).__name__}"


def _hook_pil(clock: StageClock) -> bool:
    image_module = sys.modules.get("PIL.Image")
    if image_module is None:
        return False
    from PIL import ImageFile as file_module  # PIL.Image's own sibling, imported by its first open anyway

    image_module.open = _timed_open(clock, image_module.open)  # type: ignore[attr-defined]
    image_file = file_module.ImageFile
    load = image_file.load

    def timed_load(self: Any) -> Any:
        if not clock.active or not getattr(self, "tile", None):
            return load(self)
        clock.enter()
        try:
            return load(self)
        finally:
            clock.leave(f"PIL decode {getattr(self, 'format', None) or 'image'}", None, pixels(self))

    image_file.load = timed_load  # type: ignore[method-assign]
    return True


def _timed_open(clock: StageClock, function: Callable[..., Any]) -> Callable[..., Any]:
    """PIL.Image.open timed as "PIL open"; the first few files' paths kept for replaying their decode."""

    def open(fp: Any, *args: Any, **kwargs: Any) -> Any:
        if not clock.active:
            return function(fp, *args, **kwargs)
        if clock.files < REPLAY_FILES and isinstance(fp, (str, os.PathLike)):
            with contextlib.suppress(Exception):  # a path-like that fails is PIL's to report, not ours
                clock.note_file(os.fspath(fp))
        clock.enter()
        try:
            return function(fp, *args, **kwargs)
        finally:
            clock.leave("PIL open")

    open._stallwatch_inner = function  # type: ignore[attr-defined]
    return open


def _hook_handover(clock: StageClock) -> bool:
    queues = sys.modules.get("multiprocessing.queues")
    if queues is None:
        return False
    pickler = queues._ForkingPickler
    dumps = pickler.dumps

    class TimedPickler(pickler):  # type: ignore[misc, valid-type]
        @classmethod
        def dumps(cls, obj: Any, protocol: int | None = None) -> Any:
            if clock.handovers <= 0:
                return dumps(obj, protocol)
            clock.handovers -= 1
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return dumps(obj, protocol)
            finally:
                clock.add_beside(HANDOVER, time.perf_counter() - t0, time.thread_time() - c0)

    queues._ForkingPickler = TimedPickler  # type: ignore[attr-defined]
    return True
