"""Sphinx configuration (numpydoc + MyST, the PyMC documentation conventions).

Tables that describe the code (sample stats, defaults, supported likelihoods, the public
API) are generated from it at every build by :mod:`pymc_minibatch_mh.doc_tables` into
``_generated/``, which the pages include; the examples in ``../examples`` run at build
time with ``--quick`` (``_ext/example_runner.py``).
"""

import sys
from pathlib import Path

import pymc_minibatch_mh
from pymc_minibatch_mh.doc_tables import write_tables

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
GENERATED = HERE / "_generated"

project = "pymc-minibatch-mh"
author = "pymc-minibatch-mh developers"
release = pymc_minibatch_mh.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "example_runner",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_enable_extensions = ["dollarmath", "colon_fence"]
# The generated tables are included into pages, not pages of their own (the API stubs
# in _generated/api/ are pages).
exclude_patterns = ["_build", "_generated/*.md", "_generated/examples"]
templates_path = ["_templates"]

# The public API: one page per name of pymc_minibatch_mh.__all__ (and of the diagnostics'
# __all__), written with the tables into _generated/api/ and listed by the autosummary
# tables of _generated/api_public.md, which api.md includes.
autosummary_generate = False
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_member_order = "bysource"
numpydoc_show_class_members = False
numpydoc_xref_param_type = False

# Links to the projects the API refers to. Each inventory is tried at its URL, then at
# a local file that holds no entries (written below): offline, or when a site is down,
# the second location loads and the links render as plain code instead of the build
# failing on "failed to reach any of the inventories" (a warning without a type, which
# suppress_warnings cannot silence and -W turns into an error).
EMPTY_INVENTORY = GENERATED / "empty-objects.inv"
intersphinx_mapping = {
    "python": ("https://docs.python.org/3", (None, str(EMPTY_INVENTORY))),
    "numpy": ("https://numpy.org/doc/stable", (None, str(EMPTY_INVENTORY))),
    "pymc": ("https://www.pymc.io/projects/docs/en/stable", (None, str(EMPTY_INVENTORY))),
    "arviz": ("https://python.arviz.org/en/stable", (None, str(EMPTY_INVENTORY))),
}
intersphinx_timeout = 10

html_theme = "alabaster"
html_static_path: list[str] = []


def _write_empty_inventory(path: Path) -> None:
    """A valid Sphinx inventory (version 2) with no entries."""
    import zlib

    header = (
        b"# Sphinx inventory version 2\n"
        b"# Project: (offline placeholder)\n"
        b"# Version: 0\n"
        b"# The remainder of this file is compressed using zlib.\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    data = header + zlib.compress(b"")
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


# Written when the configuration is read, before autosummary looks for its listing.
write_tables(GENERATED)
_write_empty_inventory(EMPTY_INVENTORY)


def _constructor_signature(app, what, name, obj, options, signature, return_annotation):
    """The step classes' signatures from their ``__init__``: autodoc reads PyMC's
    ``BlockedStep.__new__(*args, **kwargs)`` first, which says nothing."""
    if what != "class" or signature != "(*args, **kwargs)" or "__init__" not in vars(obj):
        return None
    from sphinx.util.inspect import signature as init_signature
    from sphinx.util.inspect import stringify_signature

    found = init_signature(obj.__init__, bound_method=True)
    return stringify_signature(found, unqualified_typehints=True), return_annotation


def setup(app):
    app.connect("autodoc-process-signature", _constructor_signature)
