"""The layering: traceformat (torch-free) under both tools; the analyzer never imports torch or
the recorder, the recorder never imports the analyzer (it runs `python -m analyzer`)."""

import ast
import os
import subprocess
import sys

from conftest import REPO


def _imports(package: str) -> dict[str, set[str]]:
    """Per source file of the package, the top-level packages it imports (any depth, lazily too)."""
    out = {}
    for root, _, files in os.walk(os.path.join(REPO, package)):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            tree = ast.parse(open(path).read(), path)
            mods = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    mods.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods.add(node.module.split(".")[0])
            out[os.path.relpath(path, REPO)] = mods
    return out


def test_no_import_between_recorder_and_analyzer():
    analyzer = _imports("analyzer")
    tracer = _imports("tracer")
    traceformat = _imports("traceformat")
    assert len(analyzer) > 20 and len(tracer) > 20 and len(traceformat) >= 5
    assert {f: m & {"tracer", "torch"} for f, m in analyzer.items() if m & {"tracer", "torch"}} == {}
    assert {f: m & {"analyzer"} for f, m in tracer.items() if "analyzer" in m} == {}
    bad = {"tracer", "analyzer", "torch", "polars"}
    assert {f: m & bad for f, m in traceformat.items() if m & bad} == {}


def test_analyzer_cli_loads_neither_torch_nor_the_recorder():
    code = (
        "import sys, analyzer.cli, analyzer.loader, analyzer.checks, analyzer.hang, analyzer.report, "
        "analyzer.golden; bad = sorted(m for m in sys.modules if m == 'torch' or m.split('.')[0] == 'tracer'); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def _cycles(package: str) -> list[list[str]]:
    """The import cycles of a package: strongly connected components (of more than one module) of
    the graph of its modules' imports, lazy ones inside functions included. `from pkg import name`
    counts as importing pkg.name where that is a module, else pkg itself."""
    import networkx as nx

    modules = {}
    for root, _, files in os.walk(os.path.join(REPO, package)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                dotted = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                modules[dotted.removesuffix(".__init__")] = path

    def owner(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = nx.DiGraph()
    for module, path in modules.items():
        graph.add_node(module)
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                targets = subs if len(subs) == len(node.names) else [base, *subs]
            else:
                continue
            for target in targets:
                found = owner(target)
                if found and found != module:
                    graph.add_edge(module, found)
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def test_no_import_cycle_in_tracer():
    assert _cycles("tracer") == []
