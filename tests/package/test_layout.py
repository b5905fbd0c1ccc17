"""The package's layout rules (docs: ../shared style notes; README "Contributing"), read
from the source with ``ast``: no import cycle between our modules, no private name of one
module used in another, and no ``print`` outside the benchmark's command-line output. Also
the layout of ``tests/`` itself (every test file in the wing of what it tests) and that no
script imports ``tests``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "logits_gather"
ROOT = PACKAGE.parent
WINGS = ("gather", "head", "sampling", "bench", "vllm", "package")
"""The folders of ``tests/`` that hold test files: one per part of the package (``gather``:
the core modules at the package's top level), and ``package`` for package-wide checks."""
TOP = {"__init__.py", "conftest.py", "support", *WINGS}
"""All that the top level of ``tests/`` holds (caches aside)."""


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


def _any_parameters(path: Path, tree: ast.Module) -> list[str]:
    """Parameters annotated a bare ``Any`` in ``tree``: each receives an object whose type
    its reader must guess."""
    return [
        f"{path.name}:{node.lineno} {node.name}({arg.arg}: Any)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)
        if arg.annotation is not None and ast.unparse(arg.annotation) in ("Any", "typing.Any")
    ]


def test_no_any_parameter_in_sampling() -> None:
    """Sampling's modules pass each other typed objects (the sampler's state is
    ``sampling.state.State``), never ``Any``. ``sampling.checks`` is exempt: it judges the
    caller's arguments, whatever their type."""
    planted = ast.parse("def f(sampler: Any, n: int, *, x: typing.Any = 0) -> Any: ...\n")
    assert len(_any_parameters(PACKAGE / "sampling" / "a.py", planted)) == 2
    problems = [
        problem
        for name, (path, tree) in MODULES.items()
        if name.startswith("logits_gather.sampling") and name != "logits_gather.sampling.checks"
        for problem in _any_parameters(path, tree)
    ]
    assert problems == []


def _imports_tests(tree: ast.Module) -> list[int]:
    """Lines of ``tree`` that import the ``tests`` package or one of its modules."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        if any(name.split(".")[0] == "tests" for name in names):
            lines.append(node.lineno)
    return lines


def test_scripts_import_nothing_from_tests() -> None:
    """What a script shares with the tests lives in ``scripts/support``."""
    planted = ast.parse("import os\nfrom tests.support import gpu\nimport tests.dist\n")
    assert _imports_tests(planted) == [2, 3]
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "scripts").rglob("*.py"))
        for line in _imports_tests(ast.parse(path.read_text(), str(path)))
    ]
    assert found == []


def _misplaced(tests: Path) -> list[str]:
    """What is out of place under ``tests``: a top-level entry beyond :data:`TOP`, a wing
    without ``__init__.py`` (which keeps two wings' test files free to share a name), and a
    test file anywhere but directly in a wing's folder."""
    bad = [p.name for p in tests.iterdir() if p.name not in TOP and p.name[0] not in "._"]
    bad += [f"{w}/__init__.py" for w in WINGS if not (tests / w / "__init__.py").is_file()]
    bad += [
        str(p.relative_to(tests))
        for p in tests.rglob("test_*.py")
        if p.parent.parent != tests or p.parent.name not in WINGS
    ]
    return sorted(set(bad))


def test_every_test_file_sits_in_its_wing(tmp_path: Path) -> None:
    for name in ("test_top.py", "gather/test_ok.py", "gather/deep/test_deep.py",
                 "support/test_helper.py", "other/test_other.py"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    for wing in WINGS[1:]:
        (tmp_path / wing).mkdir()
        (tmp_path / wing / "__init__.py").write_text("")
    assert _misplaced(tmp_path) == [
        "gather/__init__.py",
        "gather/deep/test_deep.py",
        "other",
        "other/test_other.py",
        "support/test_helper.py",
        "test_top.py",
    ]
    assert _misplaced(ROOT / "tests") == []
