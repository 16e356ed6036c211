"""A Sphinx directive that runs an example script at build time and shows its output.

::

    ```{example-run} logistic_tall.py
    :args: --quick
    :images: rank_plots_good.png rank_plots_bad.png
    ```

runs ``python examples/logistic_tall.py --quick`` (the interpreter that runs Sphinx, in a
scratch directory, with ``{out}`` in ``:args:`` replaced by an output directory), then
shows the script's source, its standard output and the images it wrote into that
directory. A script that fails fails the build (a warning, which ``-W`` turns into an
error), so the examples in the documentation are known to run.

``PYMC_MINIBATCH_MH_DOCS_EXAMPLES=0`` in the environment shows the sources without running
them (for a quick look at the pages); the default runs them.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

LOGGER = logging.getLogger(__name__)
#: Where the example scripts live, relative to the documentation's source directory.
EXAMPLES = Path("..") / "examples"
#: Where the images the examples write are copied, relative to the source directory.
IMAGES = Path("_generated") / "examples"
#: Longest time one example may take (seconds).
TIMEOUT = 900
SWITCH = "PYMC_MINIBATCH_MH_DOCS_EXAMPLES"


def examples_enabled() -> bool:
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


class ExampleRun(SphinxDirective):
    """Run ``examples/<script>`` and show its source and output."""

    required_arguments = 1
    option_spec = {
        "args": directives.unchanged,
        "images": directives.unchanged,
    }

    def run(self) -> list[nodes.Node]:
        srcdir = Path(self.env.srcdir)
        script = (srcdir / EXAMPLES / self.arguments[0]).resolve()
        if not script.is_file():
            raise self.error(f"example-run: no example script {script}")
        self.env.note_dependency(str(script))
        source = script.read_text(encoding="utf-8")
        shown = [
            nodes.paragraph(
                "",
                "",
                nodes.Text("Run it yourself: "),
                nodes.literal(
                    text=f"python examples/{script.name} {self.options.get('args', '')}".strip()
                ),
            )
        ]
        block = nodes.literal_block(source, source, language="python")
        shown.append(nodes.container("", block, classes=["example-source"]))
        if not examples_enabled():
            note = f"(Not run in this build: {SWITCH}=0.)"
            return [*shown, nodes.paragraph(note, note)]
        with tempfile.TemporaryDirectory(prefix="example-run-") as scratch:
            output = self._run(script, Path(scratch))
            shown.append(nodes.rubric("", "Output (this build)"))
            shown.append(nodes.literal_block(output, output, language="text"))
            shown += self._images(Path(scratch), srcdir, script.stem)
        return shown

    def _run(self, script: Path, scratch: Path) -> str:
        args = shlex.split(self.options.get("args", "").replace("{out}", str(scratch)))
        env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
        start = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, str(script), *args],
                cwd=scratch,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise self.error(f"example-run: {script.name} took more than {TIMEOUT} s") from None
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            tail = "\n".join(done.stderr.splitlines()[-30:])
            raise self.error(
                f"example-run: {script.name} {' '.join(args)} failed "
                f"(exit code {done.returncode}):\n{tail}"
            )
        LOGGER.info(f"example-run: {script.name} ran in {seconds:.0f} s")
        return done.stdout.replace(str(scratch), "<out>").rstrip() + "\n"

    def _images(self, scratch: Path, srcdir: Path, stem: str) -> list[nodes.Node]:
        shown = []
        for name in self.options.get("images", "").split():
            found = scratch / name
            if not found.is_file():
                raise self.error(f"example-run: the example wrote no image {name}")
            target = srcdir / IMAGES / f"{stem}-{name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found, target)
            uri = "/" + (IMAGES / target.name).as_posix()
            shown.append(nodes.image(uri=uri, alt=name))
        return shown


def setup(app):
    app.add_directive("example-run", ExampleRun)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
