"""Wrap methods of a class and of every subclass that defines its own, subclasses defined later included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]  # a class's own method -> its wrapper

# NOTE [ Overrides ]
# Patching DataLoader.__iter__ reaches a subclass only if it does not define
# its own, or calls DataLoader's. torchdata's StatefulDataLoader defines
# __init__ and __iter__ and calls neither of DataLoader's, so patching
# DataLoader alone recorded nothing of it (and torch is moving statefulness
# into DataLoader itself, pytorch#166732, where more subclasses may follow).
# So the patch covers the class's family: every class in it that defines a
# patched method in its own body gets that method wrapped, both the classes
# that exist at install (found through __subclasses__) and the ones defined
# while installed (the base's __init_subclass__, which Python calls for each
# new subclass before any instance of it exists). Uninstalling puts every
# original back. A subclass whose own __init_subclass__ does not call
# super() hides the subclasses defined under it later from the hook.


class FamilyPatch:
    """``wraps`` maps a method name to what wraps it; ``install`` applies it to ``base`` and its family."""

    def __init__(self, base: type, wraps: dict[str, Wrap]) -> None:
        self.base = base
        self._wraps = wraps
        self._originals: list[tuple[type, str, Any]] = []  # (class, name, its own method), in patch order
        self._ours: dict[int, Callable[..., Any]] = {}  # id -> wrapper, for is_ours (and kept alive)
        self._hook: tuple[Any, Any] | None = None  # (our __init_subclass__, the base's own, or None)

    def install(self) -> None:
        if self._hook is not None:
            return
        for cls in family(self.base):
            self.patch(cls)
        base: Any = self.base
        own, patch = base.__dict__.get("__init_subclass__"), self.patch

        def __init_subclass__(cls: Any, **kwargs: Any) -> None:
            if isinstance(own, classmethod):
                own.__get__(None, cls)(**kwargs)
            else:
                super(base, cls).__init_subclass__(**kwargs)  # typing.Generic's, for DataLoader
            patch(cls)

        hook: Any = classmethod(__init_subclass__)
        type.__setattr__(base, "__init_subclass__", hook)
        self._hook = (hook, own)

    def uninstall(self) -> None:
        if self._hook is None:
            return
        hook, own = self._hook
        self._hook = None
        if self.base.__dict__.get("__init_subclass__") is hook:
            if own is None:
                type.__delattr__(self.base, "__init_subclass__")
            else:
                type.__setattr__(self.base, "__init_subclass__", own)
        for cls, name, original in reversed(self._originals):
            type.__setattr__(cls, name, original)
        self._originals.clear()
        self._ours.clear()

    def patch(self, cls: type) -> None:
        """Wrap the methods ``cls`` defines itself (once): see NOTE [ Overrides ]."""
        for name, wrap in self._wraps.items():
            original = cls.__dict__.get(name)
            if not callable(original) or id(original) in self._ours:
                continue
            wrapper = wrap(original)
            try:
                type.__setattr__(cls, name, wrapper)
            except (AttributeError, TypeError):  # a class that refuses: left as it is, unrecorded
                continue
            self._ours[id(wrapper)] = wrapper
            self._originals.append((cls, name, original))

    def is_ours(self, method: Any) -> bool:
        """True for a wrapper this patch installed (while installed)."""
        return self._ours.get(id(method)) is method


def family(base: type) -> list[type]:
    """``base`` and every subclass of it defined so far, each once, parents first."""
    out, seen, todo = [], set(), [base]
    while todo:
        cls = todo.pop(0)
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        out.append(cls)
        todo.extend(type.__subclasses__(cls))
    return out
