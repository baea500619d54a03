"""The shape of the house (docs/architecture.md), checked from the source: the library's
imports form no cycle — imports inside functions count, they only hide a cycle until the
function runs — and the library never imports the lab; the lab's rooms are not in it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "src" / "forgetting"
LAB = ROOT / "benchmarks" / "forgetting_lab"
TESTS = ROOT / "tests"


def _modules(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package in ``package_dir``."""
    top = package_dir.parent
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(top).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, anywhere in its body.

    ``from package import submodule`` is an edge to the submodule only (importing a
    submodule runs its package's ``__init__``, which every module of the package does
    anyway); ``from package import name`` is an edge to the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            wanted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            wanted = subs if len(subs) == len(node.names) else [base, *subs]
        else:
            continue
        for target in wanted:
            parts = target.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts and ".".join(parts) != name:
                targets.add(".".join(parts))
    return targets


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_library_has_no_import_cycles():
    cycles = _cycles(_graph(_modules(LIBRARY)))
    assert not cycles, f"import cycles in src/forgetting: {cycles}"


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def late():\n    from .a import thing\n")
    assert _cycles(_graph(_modules(package))) == [["pkg.a", "pkg.b"]]


def _lab_imports(package_dir: Path) -> list[str]:
    """``path:line`` of every import of the lab (``forgetting_lab``) under ``package_dir``."""
    offenders = []
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            if any(n == "forgetting_lab" or n.startswith("forgetting_lab.") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return offenders


def test_the_library_never_imports_the_lab():
    offenders = _lab_imports(LIBRARY)
    assert not offenders, f"the library imports the lab at {offenders}"


def test_the_library_tests_never_import_the_lab():
    """tests/ runs on the library alone: a test that needs the lab, if only for a dataset,
    lives in benchmarks/tests/ (tests/README.md)."""
    offenders = _lab_imports(TESTS)
    assert not offenders, (
        f"library tests import the lab at {offenders}: move them to benchmarks/tests"
    )


def test_the_lab_lives_beside_the_library():
    for room in ("bench", "datasets", "durableun", "baselines", "demo.py"):
        assert not (LIBRARY / room).exists(), f"src/forgetting/{room} belongs to the lab"
        assert (LAB / room).exists() or (LAB / room).with_suffix(".py").exists()


LAYERS = (
    (
        "_rowwise",
        "_parallel",
        "_clock",
        "_rebuilds",
        "_sklearn_pandas",
        "_masked_repr",
        "labels",
        "ids",
        "receipts",
        "snapshots",
    ),
    ("content",),
    ("schema", "encoders", "privacy"),
    ("instance", "rows"),
    ("engine", "forest"),
    ("distributed", "io"),
    ("persistence", "parameters", "preprocessing"),
    ("estimators",),
    ("store", "munkey", "audit", "pipeline"),
    ("service", "warmup"),
    ("cli",),
    ("__main__",),
)
"""The library's rooms from the bottom up (docs/architecture.md): a module imports only from
its own room and the rooms of lower layers (not from another room of its own layer). The
package root (``forgetting/__init__.py``) imports its public names lazily and is reachable
from everywhere (``__version__``)."""


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_has_a_room():
    rooms = {room for layer in LAYERS for room in layer}
    homeless = {_room(m) for m in _modules(LIBRARY)} - rooms - {None}
    assert not homeless, f"modules of no layer (add them to LAYERS and the doc): {homeless}"


def test_the_library_tests_are_filed_by_room():
    """A folder of tests/ is named after the room it tests; "shared" holds layer 0's small
    shared pieces (tests/README.md)."""
    rooms = {room for layer in LAYERS for room in layer} | {"shared"}
    folders = {path.name for path in TESTS.iterdir() if path.is_dir()} - {"__pycache__"}
    assert folders <= rooms, f"test folders named after no room: {sorted(folders - rooms)}"


def test_imports_only_go_down_the_layers():
    level = {room: i for i, layer in enumerate(LAYERS) for room in layer}
    upward = []
    for module, targets in _graph(_modules(LIBRARY)).items():
        source = _room(module)
        for target in targets:
            room = _room(target)
            if source is None or room is None or room == source:
                continue
            if level[room] >= level[source]:
                upward.append(f"{module} -> {target}")
    assert not upward, f"imports that do not go down the layers: {upward}"


NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
"""Underscored names that are a namedtuple's public API, not a private field."""


def _private_names_by_room(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each underscored (not dunder) attribute a class of the library defines — a method, or
    a field assigned on ``self``/``cls`` — and the rooms that define it."""
    rooms: dict[str, set[str]] = {}
    for module, path in modules.items():
        room = _room(module)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in ast.walk(node):
                name = None
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = item.name
                elif (
                    isinstance(item, ast.Attribute)
                    and isinstance(item.ctx, ast.Store)
                    and isinstance(item.value, ast.Name)
                    and item.value.id in ("self", "cls")
                ):
                    name = item.attr
                if name and name.startswith("_") and not name.startswith("__"):
                    rooms.setdefault(name, set()).add(room)
    return rooms


def _cross_room_private_reaches(package_dir: Path) -> list[str]:
    """``other._field`` in one room where ``_field`` is only defined by another room's
    classes (``self``/``cls``/``super()`` are a class's own business)."""
    modules = _modules(package_dir)
    owners = _private_names_by_room(modules)
    found = []
    for module, path in modules.items():
        room = _room(module)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")):
                continue
            if node.attr.startswith("__") or node.attr in NAMEDTUPLE_API:
                continue
            value = node.value
            if isinstance(value, ast.Name) and value.id in ("self", "cls"):
                continue
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "super":
                continue
            rooms = owners.get(node.attr, set())
            if rooms and room not in rooms:
                where = path.relative_to(package_dir.parent)
                found.append(f"{where}:{node.lineno} .{node.attr} (a field of {sorted(rooms)})")
    return found


def test_no_room_reaches_into_another_rooms_private_fields():
    """docs/architecture.md, "The seams": a room changes another's state through its methods,
    never its private fields — so a room may change its internals without breaking another."""
    reaches = _cross_room_private_reaches(LIBRARY)
    assert not reaches, f"private fields reached across rooms: {reaches}"


def test_the_private_reach_finder_finds_one(tmp_path):
    package = tmp_path / "pkg"
    (package / "a").mkdir(parents=True)
    (package / "b").mkdir()
    for init in (package, package / "a", package / "b"):
        (init / "__init__.py").write_text("")
    (package / "a" / "thing.py").write_text(
        "class Thing:\n    def __init__(self):\n        self._secret = 1\n"
    )
    (package / "b" / "user.py").write_text("def peek(thing):\n    return thing._secret\n")
    (package / "b" / "fine.py").write_text("def own(x):\n    return x._replace(a=1)\n")
    assert _cross_room_private_reaches(package) == ["pkg/b/user.py:2 ._secret (a field of ['a'])"]
