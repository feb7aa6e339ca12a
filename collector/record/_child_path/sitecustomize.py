"""Imported by every Python that ``collector run`` starts: records its DataLoaders. See NOTE [ Child processes ]."""

import importlib.machinery
import importlib.util
import json
import os
import sys

ENV = "STALLWATCH_AUTOWATCH"


def _ours(settings: dict) -> bool:
    """This Python is the script's own: the same prefix and version (NOTE [ Child processes ])."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return settings.get("python") == [os.path.realpath(sys.prefix), version]


def _leave(here: str, settings: dict) -> None:
    """Another Python: our folder off its path, and its children's environment as it was before ``collector run``."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    os.environ.pop(ENV, None)
    before = settings.get("pythonpath")
    if before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = before


def _boot() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    raw = os.environ.get(ENV)
    try:
        settings = json.loads(raw) if raw else None
    except ValueError:
        settings = None
    if isinstance(settings, dict) and not _ours(settings):
        _leave(here, settings)
    elif isinstance(settings, dict):
        root = settings.get("package_root")
        if importlib.machinery.PathFinder.find_spec("collector", sys.path) is None and isinstance(root, str):
            sys.path.append(root)  # a script run from outside the checkout collector/ was started from
        try:
            from collector.record.childboot import boot

            boot()
        except Exception as exc:  # noqa: BLE001 - the child must start even when stallwatch cannot
            sys.stderr.write(f"stallwatch: not recording this process: {type(exc).__name__}: {exc}\n")
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    shadowed = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if shadowed is not None and shadowed.loader is not None:
        module = importlib.util.module_from_spec(shadowed)
        sys.modules[__name__] = module
        shadowed.loader.exec_module(module)


_boot()
