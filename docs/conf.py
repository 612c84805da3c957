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
# The page docs/offline-data-helps.md (the MuJoCo study) joins the toctree by a glob as soon
# as it exists; until then the glob matching nothing is not an error.
suppress_warnings = ["toc.empty_glob"]

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

html_theme = "furo"
html_title = f"mixreplay {release}"
html_static_path: list[str] = []
