"""Imported by every Python that ``collector run`` starts: records its DataLoaders. See NOTE [ Child processes ]."""

import importlib.machinery
import importlib.util
import os
import sys


def _boot() -> None:
    if os.environ.get("STALLWATCH_AUTOWATCH"):
        try:
            from collector.record.childboot import boot

            boot()
        except Exception as exc:  # noqa: BLE001 - the child must start even when stallwatch cannot
            sys.stderr.write(f"stallwatch: not recording this process: {type(exc).__name__}: {exc}\n")
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    shadowed = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if shadowed is not None and shadowed.loader is not None:
        module = importlib.util.module_from_spec(shadowed)
        sys.modules[__name__] = module
        shadowed.loader.exec_module(module)


_boot()
