"""The random draws a tuned loader makes, kept where the user's own setting would have left them."""

from __future__ import annotations

import sys
from typing import Any

from collector.record.loader_setting import target_of
from collector.tune.policy import Setting

# NOTE [ The same samples ]
# A map-style loader's order comes from its sampler, whatever the worker
# count; but every iterator the DataLoader builds first draws a base seed
# for its workers from the loader's generator (or torch's global one),
# the generator a shuffling sampler draws its permutation from. Persistent
# workers build one iterator a run, so they draw once, not each epoch: a
# tuner that turned them on or off would change the next epoch's shuffle,
# and the global RNG the model trains with. So each epoch the tuner draws
# what the user's own setting would have drawn: one seed where the user's
# loader builds an iterator and the tuned one reuses its own, and where
# the tuned loader builds one the user's would not, the generator's state
# is put back after it (``after_iter``). An iterator that fails to open at a
# trial's setting (NOTE [ Trials never hurt ]) leaves no draw behind:
# ``rewind`` puts the generator back where the epoch began, and the draws
# are made again at the setting the loader goes back to.


class SeedStream:
    """One tuned loader's generator, drawn each epoch as the user's setting ``start`` would draw it."""

    def __init__(self, loader: Any, start: Setting) -> None:
        self.loader = loader  # the session's weak stand-in (NOTE [ Weak loader ]): never the DataLoader itself
        self.start = start
        self._restore: tuple[Any, Any] | None = None
        self._epoch_start: tuple[Any, Any] | None = None  # the generator as the epoch found it

    def _generator(self) -> Any:
        torch = sys.modules["torch"]
        return getattr(target_of(self.loader), "generator", None) or torch.default_generator

    def before_iter(self, epoch: int) -> None:
        """At the epoch's setting, before its iter(): the draw the user's loader would make, or none."""
        target, start = target_of(self.loader), self.start
        generator = self._generator()
        self._epoch_start = (generator, generator.get_state())
        user_builds = not (start.persistent_workers and start.num_workers > 0 and epoch > 0)
        we_build = not (target.persistent_workers and target.num_workers > 0 and target.__dict__.get("_iterator"))
        if user_builds and not we_build:
            sys.modules["torch"].empty((), dtype=sys.modules["torch"].int64).random_(generator=generator)
        elif we_build and not user_builds:
            self._restore = (generator, generator.get_state())

    def rewind(self) -> None:
        """The epoch's iter() failed: the generator back where the epoch found it, nothing to restore after."""
        self._restore = None
        if self._epoch_start is not None:
            generator, state = self._epoch_start
            generator.set_state(state)

    def after_iter(self) -> None:
        """The iterator is built: the generator back where the user's loader would have left it."""
        restore, self._restore = self._restore, None
        if restore is not None:
            restore[0].set_state(restore[1])
