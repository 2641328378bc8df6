"""The code's structure, kept by tests: no import circles, and the parts below the
``Store`` facade never import it (each receives the shared ``StoreContext``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"evstore": ROOT / "evstore", "evstore_cli": ROOT / "cli", "benchmarks": ROOT / "benchmarks"}


def module_name(package: str, path: Path) -> str:
    parts = [package, *path.relative_to(PACKAGES[package]).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(package: str, path: Path, known: set[str]) -> set[str]:
    """The package's own modules that ``path`` imports, at run time or for type checking alike."""
    name = module_name(package, path)
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [origin] + [f"{origin}.{alias.name}" for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p, f): (p, f) for p, d in PACKAGES.items() for f in d.rglob("*.py")}
    known = set(files)
    # ``from . import x`` in a submodule names its sibling x, not the package's __init__
    return {m: {t for t in imports_of(p, f, known) if not m.startswith(t + ".")} for m, (p, f) in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), and self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.slow
def test_no_import_circles_in_evstore_or_the_command() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.slow
def test_no_part_below_the_facade_imports_the_store() -> None:
    graph = import_graph()
    above = {"evstore", "evstore._store", "evstore._url", "evstore._async", "evstore._doctor"}
    below = [m for m in graph if m.startswith("evstore.") and m not in above and not m.startswith("evstore.integrations")]
    assert [m for m in below if "evstore._store" in graph[m]] == []


def test_the_store_facade_is_short() -> None:
    """Each method one delegation to the module of its concern: about 9 lines a method."""
    assert len((ROOT / "evstore" / "_store.py").read_text().splitlines()) <= 275


def test_no_room_of_the_library_the_command_or_the_benchmarks_is_over_500_lines() -> None:
    """A module that outgrows this is split by concern, as the read path, retention, the write path,
    the backends, the adapters, the command and the benchmarks were."""
    rooms = [path for folder in ("evstore", "cli", "benchmarks") for path in (ROOT / folder).rglob("*.py")]
    lengths = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in rooms}
    assert len(lengths) > 100
    assert {room: lines for room, lines in lengths.items() if lines > 500} == {}


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The checker itself can fail."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# ---- the read path's rooms -------------------------------------------------------

READ = "evstore._read"
#: The rooms of the read package, lowest first: each imports only rooms before it (data flows one
#: way: manifest and listing, then events, segments, lineage, and what readers ask for on top).
READ_ROOMS = ("_manifest", "_events", "_listing", "_loose", "_vouching", "_segments", "_lineage", "_operations", "_follow")
READ_DIR = ROOT / "evstore" / "_read"


def read_rooms_imported(path: Path) -> set[str]:
    """The rooms of ``evstore._read`` that ``path`` (a module of the package) imports, and
    "__init__" where it imports the package itself or a name through it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            package = READ.split(".")[: 3 - node.level] if node.level else []
            origin = ".".join([*package, *([node.module] if node.module else [])])
            modules = [f"{origin}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            if module == READ or module.startswith(READ + "."):
                room = module.removeprefix(READ).lstrip(".").split(".")[0]
                found.add(room if room in READ_ROOMS else "__init__")
    return found


def test_the_read_package_is_its_rooms_each_within_its_line_budget() -> None:
    assert sorted(path.stem for path in READ_DIR.glob("*.py")) == sorted(["__init__", *READ_ROOMS])
    assert not (ROOT / "evstore" / "_read.py").exists()
    lengths = {path.stem: len(path.read_text().splitlines()) for path in READ_DIR.glob("*.py")}
    assert {room: lines for room, lines in lengths.items() if lines > 500} == {}


def test_no_function_of_the_read_package_is_longer_than_80_lines() -> None:
    long = [
        f"{path.stem}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for path in sorted(READ_DIR.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None
        if node.end_lineno - node.lineno + 1 > 80
    ]
    assert long == []


def test_each_read_room_imports_only_the_rooms_below_it() -> None:
    arrows_up = {
        room: sorted(imported - set(READ_ROOMS[:index]))
        for index, room in enumerate(READ_ROOMS)
        if (imported := read_rooms_imported(READ_DIR / f"{room}.py")) - set(READ_ROOMS[:index])
    }
    assert arrows_up == {}


def test_the_read_package_names_each_public_name_of_its_rooms_once_in_sorted_order() -> None:
    import evstore._read as read

    public = {
        target.id if isinstance(target, ast.Name) else node.name
        for room in READ_ROOMS
        for node in ast.parse((READ_DIR / f"{room}.py").read_text()).body
        for target in (node.targets if isinstance(node, ast.Assign) else [node])
        if isinstance(target, ast.Name | ast.FunctionDef | ast.ClassDef)
    }
    assert read.__all__ == sorted(read.__all__)
    assert set(read.__all__) == {name for name in public if not name.startswith("_")}
    assert all(getattr(read, name) is not None for name in read.__all__)


def test_the_room_checker_sees_an_import_through_the_package_and_between_rooms(tmp_path: Path) -> None:
    """The checker itself can fail."""
    room = tmp_path / "_room.py"
    room.write_text(
        "from . import load\nfrom ._segments import own_raw\nfrom . import _lineage\nfrom .._ids import parse_seq\n"
        "import evstore._read._follow\nfrom .. import _read\n"
    )
    assert read_rooms_imported(room) == {"__init__", "_segments", "_lineage", "_follow"}
