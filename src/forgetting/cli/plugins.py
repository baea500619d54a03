"""``forgetting bench NAME`` and ``forgetting audit NAME``: commands other packages provide.

The library has no benchmarks of its own: the lab (``forgetting-lab``, in ``benchmarks/``)
declares them as entry points, so the library never imports it. A benchmark is a module with
``main(argv) -> int``, listed in the entry-point group ``forgetting.benchmarks``; an audit is a
module with ``configure(parser)`` and ``run(args) -> int``, listed in ``forgetting.audits``.
Only the chosen module is imported, so another one's missing dependency never matters, and
menus read each module's docstring from its source rather than importing it.

The registries are published as ``forgetting.cli.BENCHMARKS`` and ``forgetting.cli.AUDITS``
(``None``: the installed entry points) and read from there each time (:func:`_registry`), so a
mapping set there (a downstream package, a test) is what ``bench``, ``audit`` and ``--help``
offer.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from .errors import CLIError, install_hint, usage

BENCHMARK_GROUP = "forgetting.benchmarks"
AUDIT_GROUP = "forgetting.audits"

#: ``forgetting bench NAME``: name -> module with ``main(argv) -> int``; None = the entry
#: points of :data:`BENCHMARK_GROUP`.
BENCHMARKS: dict[str, str] | None = None

#: ``forgetting audit NAME``: name -> module with ``configure(parser)`` and
#: ``run(args) -> int``; None = the entry points of :data:`AUDIT_GROUP`.
AUDITS: dict[str, str] | None = None

_GROUPS = {"BENCHMARKS": BENCHMARK_GROUP, "AUDITS": AUDIT_GROUP}


def _registry(name: str) -> dict[str, str]:
    """The registry ``name`` (``BENCHMARKS`` or ``AUDITS``) as ``forgetting.cli`` publishes it
    now (see the module docstring), or the installed entry points when it is None."""
    package = sys.modules.get(__package__ or "")
    registry = getattr(package, name, globals()[name])
    if registry is None:
        registry = {ep.name: ep.module for ep in entry_points(group=_GROUPS[name])}
    return dict(registry)


def _module_exists(name: str) -> bool:
    """Whether ``name`` is importable in this installation, without importing it (a
    half-built or absent module is simply not offered)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _module_ast(name: str) -> ast.Module | None:
    """A module's syntax tree, read from its source without importing it (importing would
    pull in the module's heavy dependencies just to print a menu)."""
    spec = importlib.util.find_spec(name)
    try:
        source = Path(spec.origin).read_text(encoding="utf-8")  # type: ignore[union-attr,arg-type]
        return ast.parse(source)
    except (OSError, SyntaxError, TypeError, ValueError):
        return None


def _summary(name: str) -> str:
    """The first line of a module's docstring (:func:`_module_ast`)."""
    tree = _module_ast(name)
    doc = (ast.get_docstring(tree) or "") if tree is not None else ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _duration(name: str) -> str:
    """A benchmark module's ``EXPECTED_DURATION`` string (how long a run at its defaults
    took), read from its source; "" when it declares none."""
    tree = _module_ast(name)
    for node in tree.body if tree is not None else ():
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "EXPECTED_DURATION" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return ""


def available_benchmarks() -> list[str]:
    """The names of :data:`BENCHMARKS` whose module exists here."""
    return [name for name, module in _registry("BENCHMARKS").items() if _module_exists(module)]


def available_audits() -> list[str]:
    """The names of :data:`AUDITS` whose module exists here."""
    return [name for name, module in _registry("AUDITS").items() if _module_exists(module)]


def _import_command(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as err:
        raise CLIError(f"{module_name} needs {err.name or err}; {install_hint(err)}") from None


def _entry(module: Any, name: str) -> Callable[..., Any]:
    """A command module's entry point, or one line saying it lacks it (a half-built module)."""
    entry = getattr(module, name, None)
    if not callable(entry):
        raise CLIError(f"{module.__name__} has no {name}() entry point: it is not finished")
    return entry


def _bench_menu(names: list[str]) -> str:
    if not names:
        return "  (none in this installation: pip install forgetting-lab, see benchmarks/)"
    registry = _registry("BENCHMARKS")
    width = max(len(name) for name in names)
    lines = []
    for name in names:
        lines.append(f"  {name.ljust(width)}  {_summary(registry[name])}")
        duration = _duration(registry[name])
        if duration:
            lines.append(f"  {' ' * width}  takes: {duration}")
    return "\n".join(lines)


def run_bench(argv: list[str]) -> int:
    """``forgetting bench NAME [ARGS...]``: the ``main(ARGS)`` of NAME's module. Without a
    NAME (nothing, or ``--help``) it lists the benchmarks and how long each took, and starts
    none: most run for many minutes."""
    names = available_benchmarks()
    if not argv or argv[0] in ("-h", "--help"):
        print(
            "usage: forgetting bench NAME [OPTIONS]\n\nBenchmarks in this installation "
            "(durations: a run at the defaults on 2 cores, from benchmarks/results):\n"
            + _bench_menu(names)
            + "\n\nRun `forgetting bench NAME --help` for a benchmark's options and quick "
            "settings; results go to benchmarks/results/ unless --out says otherwise.\n"
        )
        return 0
    name, rest = argv[0], argv[1:]
    if name.startswith("-"):
        raise usage(f"name a benchmark before its options ({argv[0]!r}): forgetting bench NAME")
    if name not in names:
        known = ", ".join(names) or "none"
        listed = name in _registry("BENCHMARKS")
        state = "is not available in this installation" if listed else "unknown"
        raise usage(f"benchmark {name!r}: {state}; available: {known}")
    entry = _entry(_import_command(_registry("BENCHMARKS")[name]), "main")
    return int(entry(rest) or 0)


def run_audit(argv: list[str]) -> int:
    """``forgetting audit NAME ...``: the module of NAME configures its own options
    (``configure(parser)``) and runs them (``run(args) -> int``); only the chosen one is
    imported, so another audit's missing dependency never matters."""
    audits = _registry("AUDITS")
    names = available_audits()
    parser = argparse.ArgumentParser(
        prog="forgetting audit",
        description="Audits that attack or check a model rather than build it; the ones in "
        "this installation are listed below (an audit whose module is absent is not offered).",
        epilog="Run `forgetting audit NAME --help` for an audit's options.",
    )
    sub = parser.add_subparsers(dest="audit", metavar="AUDIT", required=True)
    for name in names:
        summary = _summary(audits[name])
        audit = sub.add_parser(name, help=summary, description=summary)
        if argv[:1] == [name]:
            module = _import_command(audits[name])
            _entry(module, "configure")(audit)
            audit.set_defaults(run=_entry(module, "run"))
    if not names:
        raise usage("no audits are available in this installation")
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)
