"""mkdocs hooks (mkdocs.yml): the lab's README and results join the site under ``lab/``,
and the README's results table becomes the page ``results.md``.

Why: the docs link to ``../benchmarks/...`` so that they read on a code host, and the results
are the evidence the guide cites; a site without them would have dead links. The files are
added as they are (nothing copied into docs/, so nothing goes stale), and links between
docs/ and the lab are rewritten to their places on the site.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "benchmarks"
_FILE_LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|#)([^)#]+\.(?:toml|txt|py|csv))\)")


def results_page() -> str:
    """The README's "## Results" section, as a page of the site."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    section = section.replace("](benchmarks/results/", "](lab/results/")
    section = section.replace("](benchmarks/README.md", "](lab/README.md")
    return "# Benchmark results\n" + section


def on_files(files, config):
    files.append(File.generated(config, "results.md", content=results_page()))
    files.append(File.generated(config, "lab/README.md", abs_src_path=str(LAB / "README.md")))
    results = LAB / "results"
    for path in sorted(results.rglob("*")):
        if path.suffix in (".md", ".png", ".toml"):
            uri = f"lab/results/{path.relative_to(results).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files):
    uri = page.file.src_uri
    if uri.startswith("lab/"):
        markdown = markdown.replace("](../docs/", "](../")
        # a repository file that is not a page (pyproject.toml, a CSV): its name, unlinked
        return _FILE_LINK.sub(r"\1 (`\2` in the repository)", markdown)
    up = "../" * uri.count("/")
    markdown = markdown.replace("](../benchmarks/results/", f"]({up}lab/results/")
    return markdown.replace("](../benchmarks/README.md", f"]({up}lab/README.md")
