"""Sphinx configuration (numpydoc + MyST, the PyMC documentation conventions)."""

import pymc_minibatch_mh

project = "pymc-minibatch-mh"
author = "pymc-minibatch-mh developers"
release = pymc_minibatch_mh.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_enable_extensions = ["dollarmath", "colon_fence"]
exclude_patterns = ["_build"]

autodoc_typehints = "none"
autodoc_member_order = "bysource"
numpydoc_show_class_members = False
numpydoc_xref_param_type = False

html_theme = "alabaster"
html_static_path: list[str] = []
