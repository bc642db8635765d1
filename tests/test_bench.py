"""The benchmark scripts share their helpers through bench/common.py and never import one another
in a circle (issue 27, item 3): read from their source, so faiss and sqlite-vec need not be
installed."""

import ast
import os

from conftest import ROOT

BENCH = os.path.join(ROOT, "bench")


def bench_imports() -> dict:
    """Each bench script's name and the bench scripts it imports, at any depth of its code."""
    scripts = {name[:-3] for name in os.listdir(BENCH) if name.endswith(".py")}
    graph = {}
    for script in sorted(scripts):
        with open(os.path.join(BENCH, script + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        graph[script] = sorted(names & scripts - {script})
    return graph


def cycle(graph: dict) -> list:
    """One import circle of ``graph`` as the list of its scripts, or [] when there is none."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for after in graph[node]:
            if state.get(after) == "open":
                return path[path.index(after) :] + [after]
            if after not in state:
                found = visit(after, [*path, after])
                if found:
                    return found
        state[node] = "done"
        return []

    for start in graph:
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return []


def test_no_bench_script_imports_another_in_a_circle():
    graph = bench_imports()
    assert cycle(graph) == []


def test_the_cycle_finder_finds_a_circle():
    assert cycle({"run": ["vectors"], "vectors": ["page_size"], "page_size": ["run"]}) == [
        "run",
        "vectors",
        "page_size",
        "run",
    ]


def test_the_three_vector_scripts_share_common_and_not_one_another():
    graph = bench_imports()
    assert graph["page_size"] == ["common"]
    assert graph["vectors"] == ["common"]
    assert "common" in graph["run"] and "page_size" not in graph["run"]
    assert [s for s, imports in graph.items() if "run" in imports] == []
