"""The layout is the architecture: each stage imports only the stages below it on the data path."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = {"errors", "version"}  # every stage may raise a public error (errors.py) and read __version__ (version.py)
# stage -> the stages it may import (besides itself and SHARED)
ALLOWED = {
    "cli": {
        "sweep",
        "record",
        "tune",
        "writer",
        "sample",
        "store",
        "diagnosis",
        "export",
        "verdict",
        "report",
        "__init__",
    },
    "export": {"store", "diagnosis"},
    "sweep": {"record", "store", "diagnosis"},
    "record": {"writer", "sample", "store", "tune", "export"},
    # watch(log=...) hands trackers the exporter's own figures (record/live.py reads them with export/live.py)
    # live tuning's decisions and its helper process, which runs the prediction model
    "tune": {"diagnosis", "store", "writer"},
    "writer": {"sample", "store"},
    # the sampler keys its rows by the sample tables' names (store/schema.py SAMPLE_TABLES)
    "sample": {"store"},
    "store": set(),
    "diagnosis": {"store"},
    # the verdict printed when a recorded script ends, and the helper process that prepares it (a writer-like child)
    "verdict": {"writer", "store", "diagnosis"},
    # the app also reads back and formats a sweep's settings (diagnosis's Setting) with sweep/grid.py's helpers
    "app": {"store", "diagnosis", "report", "sweep", "__init__"},
    # the framework callbacks (collector/lightning.py, collector/hf.py): a recording and its printed verdict
    "lightning": {"verdict", "record", "sample"},
    "hf": {"verdict", "record", "sample"},
}
MAX_LINES = 310  # about 300


def stage_of(module: str) -> str | None:
    """``collector.record.session`` -> ``record``; ``app.views.run`` -> ``app``; other packages -> None."""
    parts = module.split(".")
    if parts[0] == "app":
        return "app"
    if parts[0] != "collector":
        return None
    if len(parts) == 1 or not any((ROOT / "collector" / name).exists() for name in (parts[1], parts[1] + ".py")):
        return "__init__"  # collector itself, or a name it defines (watch, diagnose)
    return parts[1]


def imported_modules(path: Path) -> set[str]:
    """Every collector/app module ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in ("collector", "app")}


def sources() -> list[Path]:
    return sorted([*(ROOT / "collector").rglob("*.py"), *(ROOT / "app").rglob("*.py")])


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_imports_only_the_stages_below_it(path):
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    stage = stage_of(module)
    if stage in (None, "__init__", "__main__", "report", *SHARED):
        return  # the facade and the shared errors sit above and beside every stage
    upward = {t for t in imported_modules(path) if stage_of(t) not in (None, stage, *SHARED, *ALLOWED[stage])}
    assert not upward, f"{module} ({stage}) imports {sorted(upward)}, which are not below it"


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_is_small_and_says_what_it_is_for(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name} has {len(text.splitlines())} lines"
    if text.strip():
        assert ast.get_docstring(ast.parse(text)), f"{path.name} starts with no docstring"


def module_of(path: Path) -> str:
    """``collector/record/session.py`` -> ``collector.record.session``; a package's ``__init__.py`` -> the package."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_no_two_modules_import_each_other():
    """At the top, inside a function or for type checking alike: one of the two sits below the other."""
    paths = {module_of(path): path for path in sources()}
    imports = {}
    for module, path in paths.items():
        parents = {module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)}  # imported with any submodule
        imports[module] = {m for m in imported_modules(path) if m in paths and m != module and m not in parents}
    pairs = sorted({tuple(sorted((a, b))) for a, targets in imports.items() for b in targets if a in imports[b]})
    assert not pairs, f"these modules import each other: {pairs}"
