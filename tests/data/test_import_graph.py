"""The data layer stands alone: none of its modules imports the layers that read data."""

import ast
import subprocess
import sys
from pathlib import Path

import pymc_minibatch_mh

PACKAGE = Path(pymc_minibatch_mh.__file__).parent
#: The layers above the data layer (they read data through it, never the other way).
ABOVE = ("likelihood", "bounds", "step_methods", "kernels", "diagnostics", "bench")


def imported_modules(source: str) -> set[str]:
    """Every module named by an import statement anywhere in ``source`` (function-level
    imports included)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def forbidden(names: set[str]) -> set[str]:
    prefixes = tuple(f"pymc_minibatch_mh.{layer}" for layer in ABOVE)
    return {name for name in names if name.startswith(prefixes)}


def test_no_data_module_imports_a_layer_above_it():
    modules = sorted((PACKAGE / "data").glob("*.py"))
    assert len(modules) >= 7
    for path in modules:
        assert not forbidden(imported_modules(path.read_text())), path.name
    # Negative control: a function-level import of the likelihood engine is found.
    source = "def f():\n    from pymc_minibatch_mh.likelihood.tall_data import TallData\n"
    assert forbidden(imported_modules(source)) == {
        "pymc_minibatch_mh.likelihood.tall_data",
        "pymc_minibatch_mh.likelihood.tall_data.TallData",
    }


def test_importing_every_data_module_loads_no_layer_above_it():
    names = [f"pymc_minibatch_mh.data.{p.stem}" for p in (PACKAGE / "data").glob("*.py")]
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(' '.join(m for m in sys.modules if m.startswith('pymc_minibatch_mh')))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "pymc_minibatch_mh.data.row_design" in loaded
    assert not forbidden(set(loaded)), forbidden(set(loaded))
