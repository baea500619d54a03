"""The README is the library's front door: short, its Python blocks run, its links resolve."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 300


def _text() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_is_at_most_300_lines():
    assert len(_text().splitlines()) <= MAX_LINES


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_every_python_block_runs_as_written(tmp_path):
    """Every ```python block of the README, in order, in one fresh process in an empty folder,
    the way a reader follows it: a block may use what an earlier block defined (the quick
    start's ``model``, ``key``, ``Model``), and nothing the README does not show. The files
    the blocks write (model.bin, model.db) land in that folder."""
    blocks = _python_blocks(_text())
    assert len(blocks) >= 4, "README.md lost its examples"
    # The timeout leaves room for numba's first compilation on a machine that never ran it.
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.count("forget == refit") == 2  # the quick start ran both families
    assert (tmp_path / "model.bin").exists() and (tmp_path / "model.db").exists()


def test_every_results_file_and_doc_the_readme_names_exists():
    text = _text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    named = re.findall(r"(?<![\w/.-])((?:benchmarks/results|docs)/[\w./-]*\w)", text)
    paths = sorted(set(local) | set(named))
    assert any(p.startswith("benchmarks/results/") for p in paths)
    assert any(p.startswith("docs/") for p in paths)
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"README.md names files that do not exist: {missing}"


def test_the_getting_started_page_runs_as_written(tmp_path):
    """docs/getting-started.md's Python blocks, in order, in one fresh process in an empty
    folder (the store's file lands there)."""
    text = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    blocks = _python_blocks(text)
    assert len(blocks) >= 3, "the page lost its examples"
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "True" in done.stdout  # verify() ok, and the retried forget is already_forgotten
