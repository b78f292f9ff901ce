"""No import circles in bus/, gateway/ and pipeline/ (issue 36).

Every import counts: at module level, inside functions and under ``TYPE_CHECKING`` (a typing-only
import is still a dependency a reader has to follow). A module that needs only a few fields of
another one that imports it names them in a ``Protocol`` instead (``bus.errors.CarriedMessage``,
``bus.message.message_encode.Encodable``, ``gateway.micro.Linked``). The C accelerators (``.pyi``
stubs)
are modules that import nothing.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bus", "gateway", "pipeline")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py*")):
            if path.suffix not in (".py", ".pyi") or "node_modules" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.setdefault(".".join(parts), path)
    return found


def _imported(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    if path.suffix == ".pyi":
        return
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (target := _imported(alias.name, known)) is not None:
                    yield target
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                full = f"{base}.{alias.name}"
                target = _imported(full if full in known else base, known)
                if target is not None:
                    yield target


def import_graph() -> dict[str, set[str]]:
    """Each module of the three packages and the modules of them it imports."""
    known = _modules()
    return {
        module: {target for target in _imports(module, path, known) if target != module}
        for module, path in known.items()
    }


def graph_of_the_tree() -> dict[str, set[str]]:
    """:func:`import_graph`, read in a fresh interpreter: in a test process that has run other
    tests, a ResourceWarning of their garbage, collected while ``ast`` builds a tree, makes
    CPython 3.11 raise "AST constructor recursion depth mismatch" (seen in CI)."""
    code = (
        "import json; from tests.test_layers import import_graph; "
        "print(json.dumps({m: sorted(d) for m, d in import_graph().items()}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return {module: set(deps) for module, deps in json.loads(done.stdout).items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_finds_a_circle_and_its_members() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_checker_reads_typing_only_and_function_level_imports() -> None:
    graph = graph_of_the_tree()
    assert "bus.asyncio.subscription" in graph["bus.asyncio.durable"]  # under TYPE_CHECKING
    assert "gateway.process.server" in graph["gateway.process.workers"]  # imported in _worker_main
    assert "bus.native._speedups" in graph["bus.frame.field"]  # the C accelerator, by its stub


def test_no_import_circles() -> None:
    graph = graph_of_the_tree()
    assert len(graph) > 200  # the tree was read
    report = [
        " <-> ".join(component)
        + "\n"
        + "\n".join(f"    {m} imports {sorted(graph[m] & set(component))}" for m in component)
        for component in circles(graph)
    ]
    assert not report, "import circles:\n" + "\n".join(report)
