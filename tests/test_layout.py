"""The code's layout: no import cycles among the packages, narrow signatures, and a README that
names every core."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from fastnet.registry import CORES

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agents", "envs", "fastnet", "launch")


def module_graph(root: Path, *packages: str) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports anywhere in its file (function-local
    imports too: they only defer a cycle). A package's ``__init__`` is the package itself;
    ``from a.b import c`` is an edge to a.b, and to a.b.c where that is a module."""
    files = {}
    for path in (p for package in packages for p in (root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package holding this module, up level - 1
                    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = targets & files.keys()
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules (first = last), or None (depth-first search)."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once fully explored
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycles():
    graph = module_graph(ROOT, *PACKAGES)
    assert "agents.acting.ray_backend" in graph["agents.learning.learner"]  # the walk sees the imports
    assert "fastnet.kernels.dispatch" in graph["fastnet.rules"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_walk_finds_a_cycle_through_a_function_local_import(tmp_path):
    """pkg.a imports pkg.sub (its __init__) at the top; pkg.sub.b imports pkg.a inside a function,
    through ``from pkg import a``, and pkg.sub imports pkg.sub.b relatively."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("import pkg.sub\n")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("from .b import f\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("def f():\n    from pkg import a\n    return a\n")
    graph = module_graph(tmp_path, "pkg")
    assert graph == {"pkg": set(), "pkg.a": {"pkg.sub"}, "pkg.sub": {"pkg.sub.b"}, "pkg.sub.b": {"pkg", "pkg.a"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.a"]
    (tmp_path / "pkg" / "sub" / "b.py").write_text("def f():\n    return 1\n")
    assert find_cycle(module_graph(tmp_path, "pkg")) is None


MAX_PARAMETERS = 10  # issue 43: no non-kernel function takes more
# Triton kernels, their autograd Functions and the references that mirror their tensor arguments
KERNEL_DIRS = ("fastnet/kernels",)


def wide_functions(root: Path, *packages: str) -> list[str]:
    """``file:function (n)`` for each function of ``packages`` (outside :data:`KERNEL_DIRS`, and not
    a Numba kernel: decorated ``njit`` or ``jit``) that takes more than :data:`MAX_PARAMETERS`
    parameters, ``self`` and ``cls`` not counted."""
    wide = []
    for path in (p for package in packages for p in sorted((root / package).rglob("*.py"))):
        name = path.relative_to(root).as_posix()
        if name.startswith(KERNEL_DIRS):
            continue
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            decorators = {ast.unparse(d.func if isinstance(d, ast.Call) else d).rpartition(".")[2]
                          for d in node.decorator_list}
            params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            count = len([p for p in params if p.arg not in ("self", "cls")])
            if count > MAX_PARAMETERS and not decorators & {"njit", "jit"}:
                wide.append(f"{name}:{node.name} ({count})")
    return sorted(wide)


def test_no_function_outside_the_kernels_takes_more_than_ten_parameters():
    assert wide_functions(ROOT, *PACKAGES, "cuda") == []


def test_the_signature_check_counts_parameters_and_skips_numba_kernels(tmp_path):
    (tmp_path / "pkg").mkdir()
    ten = ", ".join(f"a{i}" for i in range(10))
    (tmp_path / "pkg" / "m.py").write_text(
        f"class C:\n    def ok(self, {ten}):\n        pass\n\n"  # ten and self
        f"    def wide(self, {ten}, *, b=1):\n        pass\n\n"
        f"@njit(cache=True)\ndef kernel({ten}, b, c):\n    pass\n\n"
        f"def wider({ten}, b, c):\n    pass\n")
    assert wide_functions(tmp_path, "pkg") == ["pkg/m.py:wide (11)", "pkg/m.py:wider (12)"]


def test_the_acting_side_does_not_import_the_learning_side():
    graph = module_graph(ROOT, *PACKAGES)
    acting = [m for m in graph if m.startswith("agents.acting")]
    assert acting and not [(m, e) for m in acting for e in graph[m] if e.startswith("agents.learning")]


def test_the_readme_names_every_registered_core():
    readme = (ROOT / "README.md").read_text()
    listed = re.search(r"`--core` takes `([^`]*)`", readme)
    assert listed, "the main job's section lists the cores `--core` takes"
    assert listed.group(1).split() == list(CORES)
    table = readme.split("## The memory cores")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert sorted(rows) == sorted(CORES), "the table of the memory cores has one row per registered core"


def test_packages_import_only_leftwards_as_docs_architecture_draws():
    """fastnet <- envs <- agents <- launch: a package imports none to its right."""
    graph = module_graph(ROOT, *PACKAGES)
    order = ("fastnet", "envs", "agents", "launch")
    backwards = [(m, e) for m in graph for e in graph[m]
                 if order.index(e.split(".")[0]) > order.index(m.split(".")[0])]
    assert not backwards
    assert "fastnet  <-  envs  <-  agents  <-  launch" in (ROOT / "docs" / "architecture.md").read_text()
