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
