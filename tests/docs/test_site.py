"""The documentation site: every public name has a reference entry, and the site builds with
no warning.

The build itself (a minute of CPU) is marked ``docs``: ``scripts/test.sh`` runs it in a phase
of its own (``pytest -m docs``), so the main suite stays fast. The source-level check runs in
the main suite.
"""

from __future__ import annotations

import importlib
import pathlib
import re
import subprocess
import sys

import pytest

import mixreplay

ROOT = pathlib.Path(__file__).resolve().parents[2]
API = ROOT / "docs" / "api"
#: the modules users import names from, besides ``mixreplay`` itself
PUBLIC_MODULES = (
    "mixreplay.schedules",
    "mixreplay.samplers",
    "mixreplay.storages",
    "mixreplay.datasets",
    "mixreplay.datasets.memmap",
    "mixreplay.checkpoint",
    "mixreplay.transforms",
    "mixreplay.torchrl",
    "mixreplay.distributed",
    "mixreplay.errors",
)
DIRECTIVE = re.compile(r"^\.\. auto(?:class|function|exception|data)::\s+(\S+)", re.M)


def public_names() -> dict[str, list[str]]:
    """Each public name -> the documented names any one of which is its entry: its own
    dotted name, or ``mixreplay.X`` when it is the object ``mixreplay`` exports as ``X``."""
    wanted = {f"mixreplay.{name}": [f"mixreplay.{name}"] for name in mixreplay.__all__}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            choices = [f"{module_name}.{name}"]
            if name in mixreplay.__all__ and getattr(mixreplay, name) is getattr(module, name):
                choices.append(f"mixreplay.{name}")
            wanted[f"{module_name}.{name}"] = choices
    return wanted


def missing(documented: set[str]) -> list[str]:
    return sorted(n for n, choices in public_names().items() if not set(choices) & documented)


@pytest.mark.torchrl  # mixreplay.torchrl is one of the public modules
def test_every_public_name_has_an_autodoc_directive():
    documented = {m for page in API.glob("*.rst") for m in DIRECTIVE.findall(page.read_text())}
    assert missing(documented) == []
    # and no directive names something that is not public
    public = {c for choices in public_names().values() for c in choices}
    assert sorted(documented - public) == []


@pytest.mark.docs
@pytest.mark.torchrl
def test_the_site_builds_without_warnings_and_indexes_every_public_name(tmp_path):
    """``sphinx-build -W``: any warning (a broken link, a docstring docutils cannot parse, a
    page outside the toctree) fails the build; then the inventory must hold every name."""
    out = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-E", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(ROOT / "docs"), str(tmp_path / "html")],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, (out.stdout + out.stderr)[-5000:]
    from sphinx.util.inventory import InventoryFile

    with open(tmp_path / "html" / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", lambda base, uri: uri)
    documented = {
        name for kind, entries in inventory.items() if kind.startswith("py:") for name in entries
    }
    assert missing(documented) == []
    pages = {
        p.relative_to(tmp_path / "html").as_posix() for p in (tmp_path / "html").rglob("*.html")
    }
    for page in ("index.html", "getting-started.html", "recipes/resume.html", "api/buffers.html"):
        assert page in pages
