"""The README is a user's page: short, undated, with commands and code that work."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_the_readme_is_at_most_150_lines():
    assert len(README.splitlines()) <= 150


@pytest.mark.parametrize(
    "pattern, what",
    [
        (r"\b20\d\d-\d\d-\d\d\b", "a date"),
        (
            r"\b(January|February|March|April|May|June|July|August|September|October|"
            r"November|December) 20\d\d\b",
            "a date",
        ),
        (r"(?i)\bissues? #?\d+", "an issue number"),
        (r"(?<![\w&])#\d+\b", "an issue number"),
        (r"(?i)\bcommit\b", "a commit"),
    ],
)
def test_no_history_in_the_readme(pattern, what):
    found = re.findall(pattern, README)
    assert not found, f"the README holds {what}: {found}; history goes to CHANGELOG.md"


def test_no_commit_id_in_the_readme():
    words = re.findall(r"\b[0-9a-f]{7,40}\b", README)
    ids = [w for w in words if re.search(r"[a-f]", w) and re.search(r"\d", w)]
    assert not ids, ids


def test_the_history_checks_catch_what_they_look_for():
    # negative control for the patterns above
    sample = "Rerun on 2026-12-02 (commit 1a3e954), see issue 25 and #53."
    assert re.search(r"\b20\d\d-\d\d-\d\d\b", sample)
    assert re.search(r"(?i)\bissues? #?\d+", sample)
    assert re.search(r"(?<![\w&])#\d+\b", sample)
    assert [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", sample) if re.search(r"[a-f]", w)]


def test_quick_start_has_exactly_two_one_line_commands():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert [len(b.strip().splitlines()) for b in blocks] == [1, 1]
    demo, tests = (b.strip() for b in blocks)
    assert demo == "pip install . && python -m pymc_minibatch_mh.demo"
    assert tests == 'pip install -e ".[test]" && python -m pytest'
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[test]"' in ci and "python -m pytest" in ci


def test_local_links_point_to_files():
    targets = re.findall(r"\]\(([^)#]+)\)", README)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing


def test_the_complete_model_runs(tmp_path, monkeypatch):
    (block,) = [b for b in _code_blocks("python") if "mmap_mode" in b]
    assert "n = 1_000_000" in block and "pm.sample(step=MinibatchBarker(), chains=2)" in block
    small = block.replace("n = 1_000_000", "n = 20_000").replace(
        "pm.sample(step=MinibatchBarker(), chains=2)",
        "pm.sample(step=MinibatchBarker(), chains=2, cores=1, tune=100, draws=100, "
        "progressbar=False, random_seed=1)",
    )
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(small, "README.md", "exec"), namespace)
    rows = float(namespace["idata"]["sample_stats"]["batch_size"].mean())
    assert 0 < rows < 20_000
