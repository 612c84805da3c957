"""Sphinx configuration of mixreplay's documentation site.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (warnings are errors;
``tests/docs/test_site.py`` runs exactly that and checks every public name has an entry).
Pages are Markdown (MyST), so the pages users read on GitHub are the site's pages; the API
reference is reStructuredText under ``api/``, rendered from the docstrings by autodoc
(Google style, through napoleon).
"""

from __future__ import annotations

import os
import sys

# the checkout's package, not an installed copy, is what the reference documents
sys.path.insert(0, os.path.abspath(".."))

from mixreplay import __version__  # noqa: E402

project = "mixreplay"
author = "The mixreplay developers"
copyright = "2026, The mixreplay developers"
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
#: pages listed in a toctree of index.md before they are written: each joins the site as soon
#: as its file exists, and is left out of the toctree until then (see setup() below)
PLANNED_PAGES = ("offline-data-helps",)  # the MuJoCo study: when does offline data help?

# MyST: fenced ```python blocks stay code; {directive} fences are directives; headings get
# anchors so pages can link to each other's sections (#your-own-prefix)
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# autodoc: members in source order, signatures without the noise of postponed annotations
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_mock_imports: list[str] = []
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# one "Keyword Arguments" list, not a typed field per keyword: docstrings that document several
# keywords on one line ("split_trajs, writer, prefetch: ...") would otherwise turn the names
# after the first into cross-references (ambiguous: several classes have a `prefetch`)
napoleon_use_keyword = False

html_theme = "furo"
html_title = f"mixreplay {release}"
# tables and code blocks that fit the window (wider column, wrapping cells and long lines)
html_static_path = ["_static"]
html_css_files = ["mixreplay.css"]


def _drop_planned_pages(app, docname: str, source: list[str]) -> None:
    """Remove from index.md's toctrees the planned pages whose file does not exist yet."""
    if docname != "index":
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for page in PLANNED_PAGES:
        if not os.path.exists(os.path.join(here, f"{page}.md")):
            source[0] = "\n".join(line for line in source[0].split("\n") if line.strip() != page)


def setup(app) -> dict:
    app.connect("source-read", _drop_planned_pages)
    return {"parallel_read_safe": True}
