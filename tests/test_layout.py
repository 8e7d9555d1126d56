"""The code's layout: no import cycles among the packages, and a README that names every core."""
from __future__ import annotations

import ast
import os
import re

from fastnet.registry import CORES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("agents", "envs", "fastnet", "launch")


def modules() -> dict[str, str]:
    """Dotted module name -> file, for every module of the packages (a package is its __init__)."""
    found = {}
    for package in PACKAGES:
        for directory, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[dotted.removesuffix(".__init__")] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports anywhere in its file (function-local
    imports too: they only defer a cycle). ``from a.b import c`` is an edge to a.b, and to a.b.c
    when that is a module."""
    mods = modules()
    graph = {}
    for name, path in mods.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package
                    for _ in range(node.level - 1):
                        parent = parent.rpartition(".")[0]
                    base = f"{parent}.{base}".rstrip(".")
                edges.add(base)
                edges.update(f"{base}.{a.name}" for a in node.names)
        graph[name] = {e for e in edges if e in mods and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({**graph, "c": set()}) == []


def test_no_import_cycles():
    graph = import_graph()
    assert "agents.learning.learner" in graph and "agents.acting.ray_backend" in graph["agents.learning.learner"]
    assert cycles(graph) == []


def test_the_acting_side_does_not_import_the_learning_side():
    graph = import_graph()
    acting = [m for m in graph if m.startswith("agents.acting")]
    assert acting and not [(m, e) for m in acting for e in graph[m] if e.startswith("agents.learning")]


def test_the_readme_names_every_registered_core():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    listed = re.search(r"`--core` takes `([^`]*)`", readme)
    assert listed, "the main job's section lists the cores `--core` takes"
    assert listed.group(1).split() == list(CORES)
    table = readme.split("## The memory cores")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert sorted(rows) == sorted(CORES), "the table of the memory cores has one row per registered core"
