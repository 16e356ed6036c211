"""The index of a results folder: ``README.md`` listing every report the benches wrote.

Every run of ``python -m pymc_minibatch_mh.bench`` rewrites the index of its output folder,
and ``python -m pymc_minibatch_mh.bench index`` rewrites it alone. The index is built from
the reports themselves (their title, the cases they hold and the software stack line the
peer benches print), so it cannot drift from them.
"""

from __future__ import annotations

import re
from pathlib import Path

INDEX_NAME = "README.md"
#: The first line of a written index: only a file that starts with it is overwritten.
MARKER = "<!-- Written by python -m pymc_minibatch_mh.bench: do not edit. -->"
NOTES_NAME = "notes.md"
_STACK_FIELDS = ("python", "pymc", "cache")


def _title(lines: list[str], fallback: str) -> str:
    for line in lines:
        if line.startswith("# "):
            return line[2:].strip()
    return fallback


def _stack(lines: list[str]) -> str:
    """Python, PyMC and cache state from a report's ``Stack:`` line ("" when it has none)."""
    for line in lines:
        if line.startswith("Stack:"):
            fields = dict(
                part.strip().split(" ", 1)
                for part in line[len("Stack:") :].strip().rstrip(".").split(",")
                if " " in part.strip()
            )
            return ", ".join(f"{k} {fields[k]}" for k in _STACK_FIELDS if k in fields)
    return ""


def _cases(lines: list[str], shown: int = 4) -> list[str]:
    cases = [line[3:].strip() for line in lines if line.startswith("## ")]
    if len(cases) > shown:
        return [*cases[:shown], f"and {len(cases) - shown} more"]
    return cases


def _siblings(report: Path) -> str:
    links = [f"[md]({report.name})"]
    for suffix in (".json", ".png"):
        other = report.with_suffix(suffix)
        if other.exists():
            links.append(f"[{suffix[1:]}]({other.name})")
    return " ".join(links)


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("|", "/")).strip()


def index_text(results_dir: Path) -> str:
    """The markdown of the index of ``results_dir``.

    Parameters
    ----------
    results_dir : Path
        A folder of bench reports (``*.md`` with optional ``.json`` / ``.png`` siblings).

    Returns
    -------
    str
        A page with one table row per report: its files, title, cases and stack.
    """
    reports = sorted(
        p for p in Path(results_dir).glob("*.md") if p.name not in (INDEX_NAME, NOTES_NAME)
    )
    out = [
        MARKER,
        "",
        "# Benchmark results",
        "",
        "Written by `python -m pymc_minibatch_mh.bench` (every experiment rewrites this index;",
        "`python -m pymc_minibatch_mh.bench index` rewrites it alone). One row per report in",
        "this folder; each report states how it was run (data, draws, machine, whether the",
        "compile caches were warm or cold).",
    ]
    if (Path(results_dir) / NOTES_NAME).exists():
        out += [
            "",
            f"[{NOTES_NAME}]({NOTES_NAME}): the measurements with their dates and what changed",
            "between runs.",
        ]
    out += [
        "",
        "| report | files | cases | stack |",
        "|---|---|---|---|",
    ]
    for report in reports:
        lines = report.read_text(encoding="utf-8").splitlines()
        out.append(
            "| "
            + " | ".join(
                [
                    _cell(_title(lines, report.stem)),
                    _siblings(report),
                    _cell("; ".join(_cases(lines))),
                    _cell(_stack(lines)),
                ]
            )
            + " |"
        )
    return "\n".join(out) + "\n"


def write_index(results_dir: Path) -> Path:
    """Rewrite ``results_dir/README.md`` from the reports in the folder; return its path.

    Raises
    ------
    FileExistsError
        If ``README.md`` exists there and is not an index this function wrote (e.g. the
        project's README when ``--out .``): it is left as it is.
    """
    path = Path(results_dir) / INDEX_NAME
    if path.exists() and not path.read_text(encoding="utf-8").startswith(MARKER):
        raise FileExistsError(
            f"{path} exists and is not a results index written by the bench, so it is not "
            "overwritten. Give the bench an output folder of its own (--out DIR)."
        )
    path.write_text(index_text(results_dir), encoding="utf-8")
    return path
