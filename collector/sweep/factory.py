"""Find the user's loader factory from ``path/to/file.py:make_loader`` or ``package.module:make_loader``."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from collector.errors import FactoryNotFound

EXAMPLE = "train.py:make_loader or mypackage.data:make_loader"


def load_factory(spec: str) -> Callable[..., Any]:
    """The callable named by ``spec``; a one-line ``FactoryNotFound`` saying what is wrong otherwise."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise FactoryNotFound(
            f"{spec!r} does not name a function: write FILE.py:FUNCTION or MODULE:FUNCTION, e.g. {EXAMPLE}"
        )
    module = _load_file(target) if _looks_like_path(target) else _load_module(target)
    if not hasattr(module, name):
        functions = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_"))
        listed = ", ".join(functions[:8]) or "none"
        raise FactoryNotFound(f"{target} has no function {name!r} (its functions: {listed})")
    factory = getattr(module, name)
    if not callable(factory):
        raise FactoryNotFound(f"{target}:{name} is a {type(factory).__name__}, not a function returning a DataLoader")
    return factory


def _looks_like_path(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target


def _load_file(path: str) -> ModuleType:
    if not os.path.isfile(path):
        raise FactoryNotFound(f"no file {path}: give the path to the Python file that defines the factory")
    directory = os.path.dirname(os.path.abspath(path))
    stem = os.path.splitext(os.path.basename(path))[0]
    # Run as the user would: its own directory first on sys.path (sibling imports
    # work), and registered under its name so spawned workers can import it.
    if directory not in sys.path:
        sys.path.insert(0, directory)
    name = stem if stem.isidentifier() and stem not in sys.modules else f"stallwatch_factory_{abs(hash(path))}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise FactoryNotFound(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # anything the user's module raises on import
        del sys.modules[name]
        raise FactoryNotFound(f"importing {path} failed: {_one_line(exc)}") from exc
    return module


def _load_module(name: str) -> ModuleType:
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            raise FactoryNotFound(
                f"no module named {name!r}: run from the directory that holds it, or give a FILE.py path"
            ) from exc
        raise FactoryNotFound(f"importing {name} failed: {_one_line(exc)}") from exc
    except Exception as exc:  # anything the user's module raises on import
        raise FactoryNotFound(f"importing {name} failed: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
