"""The wheel holds every source package: a folder missing from pyproject.toml works in an editable install and
silently vanishes from the wheel."""

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = ("programs", "signatures", "optimizers", "data")


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_source_package_is_listed_in_pyproject():
    setuptools = _pyproject()["tool"]["setuptools"]
    listed_dirs = set(setuptools["package-dir"].values())
    found = {
        str(init.parent.relative_to(REPO))
        for root in SOURCE_ROOTS
        for init in (REPO / root).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found, "no source packages found"
    assert found - listed_dirs == set(), "add these folders to [tool.setuptools.package-dir] and packages"


def test_every_mapped_package_is_in_the_package_list():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert set(setuptools["package-dir"]) == set(setuptools["packages"])


def test_packages_live_under_the_ragscale_namespace():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert all(name.startswith("ragscale.") for name in setuptools["packages"])
