"""The package's layout rules (docs: ../shared style notes; README "Contributing"), read
from the source with ``ast``: no import cycle between our modules, no private name of one
module used in another, and no ``print`` outside the benchmark's command-line output."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "logits_gather"


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = (path, ast.parse(path.read_text(), str(path)))
    return out


MODULES = _modules()


def _imports(name: str, path: Path, tree: ast.Module) -> list[tuple[str, str, int]]:
    """``(module, imported name or "", line)`` of every import of our package in ``tree``,
    at any depth (a function-level import closes a cycle as well)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                found.append((target, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names]
    return [(t, n, line) for t, n, line in found if t.split(".")[0] == "logits_gather"]


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, (path, tree) in MODULES.items():
        for target, imported, _ in _imports(name, path, tree):
            sub = f"{target}.{imported}"
            module = sub if sub in MODULES else target
            if module != name and module in MODULES:
                edges.setdefault(name, set()).add(module)
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(MODULES):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_cycle_finder_finds_a_cycle() -> None:
    """The check below can fail: a planted cycle is found, a chain is not."""
    MODULES.setdefault("x.a", None)
    try:
        assert _cycle({"x.a": {"x.b"}, "x.b": {"x.a"}}) == ["x.a", "x.b", "x.a"]
    finally:
        del MODULES["x.a"]
    assert _cycle({"x.a": {"x.b"}}) is None


def test_no_import_cycle() -> None:
    assert len(MODULES) > 50
    assert _cycle(_edges()) is None


def _private_names(tree: ast.Module) -> set[str]:
    """Private names a module defines: its module-level functions, classes and variables,
    and the attributes it assigns on ``self``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _private_uses(name: str, path: Path, tree: ast.Module, others: set[str]) -> list[str]:
    """Uses in ``tree`` of names in ``others`` (other modules' privates): imported by name,
    or read as an attribute of anything but ``self``/``cls``."""
    own = _private_names(tree)
    uses = [
        f"{path.name}:{line} imports {imported} from {target}"
        for target, imported, line in _imports(name, path, tree)
        if imported.startswith("_") and not imported.startswith("__")
    ]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr not in others or node.attr in own:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        uses.append(f"{path.name}:{node.lineno} reads {ast.unparse(node)}")
    return uses


def test_no_private_name_crosses_modules() -> None:
    defined = {name: _private_names(tree) for name, (_, tree) in MODULES.items()}
    planted = ast.parse("from .probes import _x\nvalue = other._y\n")
    assert len(_private_uses("logits_gather.bench.a", PACKAGE / "bench" / "a.py", planted,
                             {"_y"})) == 2  # fmt: skip
    problems = []
    for name, (path, tree) in MODULES.items():
        others = set().union(*(d for m, d in defined.items() if m != name))
        problems += _private_uses(name, path, tree, others)
    assert problems == []


def test_no_print_in_the_library() -> None:
    """The library logs; only the benchmark's command-line modules print."""
    printing = sorted(
        name
        for name, (_, tree) in MODULES.items()
        if not name.startswith("logits_gather.bench")
        and any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
            for n in ast.walk(tree)
        )
    )
    assert printing == []
