"""The layering: traceformat (torch-free) under both tools; the analyzer never imports torch or
the recorder, the recorder never imports the analyzer (it runs `python -m analyzer`). Inside the
analyzer, analyzer/model/ is the ground floor (it imports nothing else from analyzer) and the
module import graph has no cycle (an import inside a function counts)."""

import ast
import os
import subprocess
import sys

import networkx as nx
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
        "import sys, analyzer.cli, analyzer.loader, analyzer.model, analyzer.model.trace, analyzer.checks, "
        "analyzer.waitfor.advance, analyzer.hang, analyzer.report, analyzer.compare.golden, analyzer.compare.summary, "
        "analyzer.render.html, analyzer.render.perfetto; "
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.split('.')[0] == 'tracer'); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def _modules(package: str) -> dict[str, str]:
    """Dotted module name -> source path, for every module of the package."""
    out = {}
    for root, _, files in os.walk(os.path.join(REPO, package)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                dotted = os.path.relpath(path, REPO)[: -len(".py")].replace(os.sep, ".")
                out[dotted.removesuffix(".__init__")] = path
    return out


def _imported(module: str, path: str, node: ast.Import | ast.ImportFrom, mods: dict[str, str]) -> list[str]:
    """The dotted names an import statement of `module` (at `path`) names, relative imports
    resolved: `from a.b import c, d` names a.b.c and a.b.d where both are modules (a.b is only
    the package they are in), else a.b and those of them that are modules."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
    return subs if len(subs) == len(node.names) else [base, *subs]


def import_graph(package: str) -> nx.DiGraph:
    """Module -> module it imports (anywhere in its source, lazily too), within the package."""
    mods = _modules(package)
    graph = nx.DiGraph()
    for module, path in mods.items():
        graph.add_node(module)
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in _imported(module, path, node, mods):
                while name and name not in mods:  # a name inside a module: that module
                    name = name.rpartition(".")[0]
                if name and name != module:
                    graph.add_edge(module, name)
    return graph


def test_analyzer_model_imports_nothing_above_it():
    graph = import_graph("analyzer")
    model = [m for m in graph if m == "analyzer.model" or m.startswith("analyzer.model.")]
    assert len(model) >= 5
    above = {m: sorted(t for t in graph.successors(m) if not t.startswith("analyzer.model")) for m in model}
    assert {m: t for m, t in above.items() if t} == {}
    # nor does it reach them through another package's module
    assert all(t.startswith("analyzer.model") for m in model for t in nx.descendants(graph, m))


def test_analyzer_import_graph_has_no_cycle():
    graph = import_graph("analyzer")
    assert graph.number_of_nodes() > 50 and graph.has_edge("analyzer.hang", "analyzer.checks.p2p")
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert cycles == []


def test_tracer_import_graph_has_no_cycle():
    graph = import_graph("tracer")
    assert graph.number_of_nodes() > 60 and graph.has_edge("tracer.cli.app", "tracer.cli.record")
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert cycles == []


# tracer's floors: the shared hooks under every mode's package; modes never import each other
_MODE_PACKAGES = ("tracer.fake", "tracer.local", "tracer.real", "tracer.numerics")


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_tracer_capture_imports_no_mode_and_modes_not_each_other():
    graph = import_graph("tracer")
    capture = [m for m in graph if _in(m, "tracer.capture")]
    assert len(capture) >= 10 and all(any(_in(m, p) for m in graph) for p in _MODE_PACKAGES)
    upward = {
        m: sorted(t for t in nx.descendants(graph, m) if _in(t, "tracer") and not _in(t, "tracer.capture"))
        for m in capture
    }
    # the shared hooks reach only themselves and the torch-free floors below them
    assert {m: t for m, t in upward.items() if set(t) - {"tracer.modes"}} == {}
    across = {
        (m, t)
        for p in _MODE_PACKAGES
        for m in graph
        if _in(m, p)
        for t in graph.successors(m)
        if any(_in(t, q) for q in _MODE_PACKAGES if q != p)
    }
    assert across == set()


def test_program_and_config_sit_below_what_runs_them():
    graph = import_graph("tracer")
    low = [m for m in graph if m == "tracer.program" or _in(m, "tracer.config")]
    reached = {m: sorted(t for t in nx.descendants(graph, m) if _in(t, "tracer")) for m in low}
    assert {m: [t for t in ts if t not in low and t != "tracer"] for m, ts in reached.items()} == {m: [] for m in low}
