"""mkdocs hooks (mkdocs.yml): the lab's README and results join the site under ``lab/``,
the README's results table becomes the page ``results.md``, and every results file gets a
place in the nav; after the build, every link of the site must resolve to a file.

Why: the docs link to ``../benchmarks/...`` so that they read on a code host, and the results
are the evidence the guide cites; a site without them would have dead links. The files are
added as they are (nothing copied into docs/, so nothing goes stale), and links between
docs/ and the lab are rewritten to their places on the site. The results files are listed in
the nav here, from the folder, so that a new one needs no edit of mkdocs.yml.

The site is built with ``use_directory_urls: false`` so that it browses from disk (file://)
as well as from a server: a link to a directory would open a listing there, not a page.
:func:`on_post_build` checks that: a relative link or asset of any page that does not name an
existing file is a warning, which ``mkdocs build --strict`` (``make docs``) turns into a
failure.

Importing this module needs no mkdocs (tests/test_docs_site.py reads :func:`results_nav`).
"""

from __future__ import annotations

import logging
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "benchmarks"
RESULTS = LAB / "results"
#: The nav section (mkdocs.yml) the results files are added to, and the title of their list.
RESULTS_SECTION = "Results"
RESULTS_FILES = "Results files"
_FILE_LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|#)([^)#]+\.(?:toml|txt|py|csv))\)")
log = logging.getLogger("mkdocs.hooks.forgetting")


def results_page() -> str:
    """The README's "## Results" section, as a page of the site."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    section = section.replace("](benchmarks/results/", "](lab/results/")
    section = section.replace("](benchmarks/README.md", "](lab/README.md")
    return "# Benchmark results\n" + section


def results_files() -> list[str]:
    """Every results page's path under benchmarks/results/ (``head/partitions.md``), sorted."""
    return sorted(path.relative_to(RESULTS).as_posix() for path in RESULTS.rglob("*.md"))


def results_nav() -> list[dict[str, str]]:
    """The nav of the results files: their list first, then each file titled by its name
    (their headings repeat: several are just "core")."""
    return [{"All results files": "lab/results/index.md"}] + [
        {name.removesuffix(".md"): f"lab/results/{name}"} for name in results_files()
    ]


def results_index() -> str:
    """The page ``lab/results/index.md``: every results file with its heading (where it says
    more than the name) and the date it was written (what the lab README's link to
    ``results/`` opens on a code host)."""
    lines = [
        "# Results files",
        "",
        "Every file in `benchmarks/results/`: each starts with the command that wrote it, the "
        "date, the machine and its load ([the lab](../README.md) says how they are measured; "
        "[benchmark results](../../results.md) has the headline of each benchmark).",
        "",
        "| file | heading | written |",
        "|---|---|---|",
    ]
    for name in results_files():
        text = (RESULTS / name).read_text(encoding="utf-8")
        heading = text.lstrip().split("\n", 1)[0].lstrip("#").strip().replace("|", "\\|")
        stem = name.removesuffix(".md")
        date = re.search(r"\b[Dd]ates?\b[^\n\d]{0,20}(\d{4}-\d{2}-\d{2})", text)  # "Date: ..."
        shown = "" if heading == stem.rsplit("/", 1)[-1] else heading
        lines.append(f"| [{stem}]({name}) | {shown} | {date.group(1) if date else ''} |")
    return "\n".join(lines) + "\n"


def on_config(config):
    """The results files join the nav's "Results" section."""
    section = next(
        (item[RESULTS_SECTION] for item in config["nav"] or () if isinstance(item, dict)
         and RESULTS_SECTION in item),
        None,
    )  # fmt: skip
    if not isinstance(section, list):
        from mkdocs.exceptions import PluginError

        raise PluginError(f'mkdocs.yml: the nav needs a "{RESULTS_SECTION}" section (a list)')
    if not any(isinstance(item, dict) and RESULTS_FILES in item for item in section):
        section.append({RESULTS_FILES: results_nav()})
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, "results.md", content=results_page()))
    files.append(File.generated(config, "lab/README.md", abs_src_path=str(LAB / "README.md")))
    files.append(File.generated(config, "lab/results/index.md", content=results_index()))
    for path in sorted(RESULTS.rglob("*")):
        if path.suffix in (".md", ".png", ".toml"):
            uri = f"lab/results/{path.relative_to(RESULTS).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files):
    uri = page.file.src_uri
    if uri.startswith("lab/"):
        markdown = markdown.replace("](../docs/", "](../")
        markdown = markdown.replace("](results/)", "](results/index.md)")  # the folder's list
        # a repository file that is not a page (pyproject.toml, a CSV): its name, unlinked
        return _FILE_LINK.sub(r"\1 (`\2` in the repository)", markdown)
    up = "../" * uri.count("/")
    markdown = markdown.replace("](../benchmarks/results/", f"]({up}lab/results/")
    return markdown.replace("](../benchmarks/README.md", f"]({up}lab/README.md")


class _Links(HTMLParser):
    """The ``href`` and ``src`` values of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.links += [value for name, value in attrs if name in ("href", "src") and value]


def broken_links(site: Path) -> list[str]:
    """Every link or asset of the site's pages (but 404.html) that names no file under
    ``site`` (a missing file; a directory, which file:// opens as a listing; a path from the
    root, which file:// reads from the disk's root), as ``page -> link``."""
    broken = []
    for page in sorted(site.rglob("*.html")):
        if page.relative_to(site).as_posix() == "404.html":
            continue  # a server's answer for any missing path: its links start at the root
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for link in dict.fromkeys(parser.links):
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path:  # elsewhere, or an anchor
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            if not target.is_file():
                broken.append(f"{page.relative_to(site).as_posix()} -> {link}")
    return broken


def on_post_build(config):
    broken = broken_links(Path(config["site_dir"]))
    for entry in broken[:20]:
        log.warning("a link that names no file (file:// would not open it): %s", entry)
    if len(broken) > 20:
        log.warning("... and %d more links that name no file", len(broken) - 20)
