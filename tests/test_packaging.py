"""What the wheel holds: every package of the tree, the dashboard under its own name, its config file."""

from __future__ import annotations

import sys
from pathlib import Path

from helpers import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - CI runs 3.11
    import tomli as tomllib

SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def _packages_under(folder: str, name: str) -> set[str]:
    root = REPO / folder
    found = {name}
    for init in root.rglob("__init__.py"):
        parts = init.parent.relative_to(root).parts
        if parts and "__pycache__" not in parts:
            found.add(".".join((name, *parts)))
    return found


def test_the_distribution_lists_every_package_of_the_tree() -> None:
    """NOTE [ The app's package name ]: the list is explicit, so a new subpackage must be added to it."""
    expected = _packages_under("collector", "collector") | _packages_under("app", "stallwatch_app")
    assert set(SETUPTOOLS["packages"]) == expected


def test_the_app_ships_as_stallwatch_app_with_its_streamlit_config() -> None:
    assert SETUPTOOLS["package-dir"] == {"stallwatch_app": "app"}
    assert SETUPTOOLS["package-data"]["stallwatch_app"] == [".streamlit/config.toml"]
    assert Path(REPO / "app" / ".streamlit" / "config.toml").is_file()
    assert "app" not in SETUPTOOLS["packages"]  # never a top-level package named `app` in site-packages


def test_the_child_boot_path_ships_with_the_collector() -> None:
    """`collector run` puts collector/record/_child_path/ on its children's PYTHONPATH: it must be in the wheel."""
    shipped = SETUPTOOLS["package-data"]["collector.record"]
    assert "_child_path/sitecustomize.py" in shipped
    assert all((REPO / "collector" / "record" / name).is_file() for name in shipped)


def test_the_recorded_version_is_the_distributions() -> None:
    """collector/version.py holds the version every run records; it must be the one the wheel is built with."""
    from collector.version import __version__

    assert __version__ == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
