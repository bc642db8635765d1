"""The C library's layout (docs/architecture.md, "The C library"): the files of csrc/ form
layers with no circle between them, read from their #include "..." lines and from the symbols
their objects define and use; no .c file includes another; no file a newcomer cannot hold.

A file and the header of the same name (kernels/simd.c and kernels/simd.h) are one module: a
file that includes a module's header depends on that module. The circle this replaced:
hybridsql.c included embedsql.h, embedsql.c model.h, and model.c hybridsql.h."""

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
# SQLite's own headers, vendored as they are; the tables scripts/unicode_tables.py generates.
VENDORED = {"sqlite3.h", "sqlite3ext.h"}
GENERATED = {"model/unicode_tables.h", "model/grapheme_tables.h"}
MOST_LINES = 1500

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def sources(root: str) -> list[str]:
    """Every .c and .h under root, as paths relative to it ("vector_index/scan.c")."""
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith((".c", ".h")):
                found.append(os.path.relpath(os.path.join(folder, name), root))
    return sorted(found)


def includes(root: str) -> dict[str, list[str]]:
    """Each file's #include "..." lines, resolved as the compiler does with -Icsrc: beside the
    including file first, then from root. A name found in neither is an error."""
    graph = {}
    for path in sources(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            named = INCLUDE.findall(f.read())
        resolved = []
        for name in named:
            beside = os.path.normpath(os.path.join(os.path.dirname(path), name))
            if os.path.isfile(os.path.join(root, beside)):
                resolved.append(beside)
            elif os.path.isfile(os.path.join(root, name)):
                resolved.append(os.path.normpath(name))
            else:
                raise AssertionError(f'{path} includes "{name}", which is not in csrc/')
        graph[path] = resolved
    return graph


def module(path: str) -> str:
    """A file's module: its path without the extension (a .c and its .h are one)."""
    return os.path.splitext(path)[0]


def modules(graph: dict[str, list[str]]) -> dict[str, set[str]]:
    """Which modules each module depends on, through the headers its files include."""
    deps: dict[str, set[str]] = {}
    for path, named in graph.items():
        mine = deps.setdefault(module(path), set())
        mine.update(module(n) for n in named if module(n) != module(path))
    return deps


def circle(graph) -> list[str] | None:
    """A circle of the graph (node -> the nodes it depends on), as the list of its nodes with the
    first repeated at the end; None when there is none."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def walk(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return None


def problems(root: str) -> list[str]:
    """What is wrong with the layout of the C files under root, one line each."""
    graph = includes(root)
    found = []
    for path, named in graph.items():
        for name in named:
            if name.endswith(".c"):
                found.append(f"{path} includes {name}, a .c file: include its header")
    for what, g in (("files", graph), ("modules", modules(graph))):
        loop = circle(g)
        if loop:
            found.append(f"a circle of {what}: {' -> '.join(loop)}")
    return found


def link_circle(root: str, tmp: str) -> list[str] | None:
    """A circle of the .c files by the symbols their objects define and use (cc -c, nm): a file
    that calls a function of another depends on it, whatever it includes."""
    defines, uses = {}, {}
    for path in sources(root):
        if not path.endswith(".c"):
            continue
        obj = os.path.join(tmp, path.replace(os.sep, "-") + ".o")
        subprocess.run(
            ["cc", "-c", "-O0", '-DHYBRIDSQL_VERSION="0"', "-I", root, "-o", obj]
            + [os.path.join(root, path)],
            check=True,
        )
        symbols = subprocess.run(["nm", obj], check=True, capture_output=True, text=True)
        rows = [line.split() for line in symbols.stdout.splitlines()]
        defines[path] = {r[-1] for r in rows if len(r) == 3 and r[1] in "TDBRC"}
        uses[path] = {r[-1] for r in rows if len(r) == 2 and r[0] == "U"}
    owner = {symbol: path for path, symbols in defines.items() for symbol in symbols}
    graph = {
        p: {owner[s] for s in used if s in owner and owner[s] != p} for p, used in uses.items()
    }
    return circle(graph)


def test_the_c_files_have_no_circle_and_no_c_file_includes_another():
    assert problems(CSRC) == []


def test_the_c_objects_call_no_file_above_them(tmp_path):
    """The include lines say what a file may call; its object says what it does call. A file
    that declared another's function itself, without its header, would show here."""
    assert link_circle(CSRC, str(tmp_path)) is None


def test_no_c_file_is_longer_than_a_newcomer_can_hold():
    long = {}
    for path in sources(CSRC):
        if os.path.basename(path) in VENDORED or path in GENERATED:
            continue
        with open(os.path.join(CSRC, path), encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines > MOST_LINES:
            long[path] = lines
    assert long == {}


def copy_of_csrc(tmp_path):
    tree = tmp_path / "csrc"
    shutil.copytree(CSRC, tree)
    return tree


def plant(tree, path: str, line: str) -> None:
    """Adds line after the first #include of tree/path."""
    file = tree / path
    text = file.read_text(encoding="utf-8")
    at = text.index("#include")
    at = text.index("\n", at) + 1
    file.write_text(text[:at] + line + "\n" + text[at:], encoding="utf-8")


def test_a_planted_include_of_a_layer_above_is_a_circle(tmp_path):
    """The kernels are the lowest layer: one that includes the entry point's header closes a
    circle through it (hybridsql.c includes kernels/simd.h)."""
    tree = copy_of_csrc(tmp_path)
    assert problems(str(tree)) == []
    plant(tree, "kernels/simd.c", '#include "hybridsql.h"')
    (found,) = problems(str(tree))
    assert found.startswith("a circle of modules: ")
    loop = found.removeprefix("a circle of modules: ").split(" -> ")
    assert loop[0] == loop[-1] and {"hybridsql", "kernels/simd"} <= set(loop)


def test_a_planted_header_circle_and_an_included_c_file_are_found(tmp_path):
    tree = copy_of_csrc(tmp_path)
    plant(tree, "common.h", '#include "kernels/simd.h"')
    plant(tree, "functions/scalar.c", '#include "kernels/topk.c"')
    found = problems(str(tree))
    assert "functions/scalar.c includes kernels/topk.c, a .c file: include its header" in found
    assert "a circle of files: common.h -> kernels/simd.h -> common.h" in found


def test_the_circle_this_layout_replaced_is_found(tmp_path):
    """main before issue 40, in miniature: the entry point included embed()'s header, embed()
    the model's, and the model the entry point's (for HS_EXPORT and hs_simd_path)."""
    tree = tmp_path / "old"
    tree.mkdir()
    files = {
        "hybridsql.h": "",
        "hybridsql.c": '#include "hybridsql.h"\n#include "embedsql.h"\n',
        "embedsql.h": "",
        "embedsql.c": '#include "embedsql.h"\n#include "model.h"\n',
        "model.h": "",
        "model.c": '#include "hybridsql.h"\n#include "model.h"\n',
    }
    for name, text in files.items():
        (tree / name).write_text(text, encoding="utf-8")
    assert problems(str(tree)) == [
        "a circle of modules: embedsql -> model -> hybridsql -> embedsql",
    ]


def test_a_planted_call_of_a_layer_above_is_a_circle_of_objects(tmp_path):
    """A kernel that declares and calls an SQL layer's function itself (no include line to
    see) closes a circle through the objects: functions/args.c calls kernels/simd.c."""
    tree = copy_of_csrc(tmp_path)
    with open(tree / "kernels" / "simd.c", "a", encoding="utf-8") as f:
        f.write("\nconst char *ordinal(int i);\nconst char *planted(void) { return ordinal(0); }\n")
    assert problems(str(tree)) == []  # no include line shows it
    objects = tmp_path / "objects"
    objects.mkdir()
    loop = link_circle(str(tree), str(objects))
    assert loop is not None and set(loop) == {"functions/args.c", "kernels/simd.c"}


@pytest.mark.parametrize("header", ["kernels/simd.h", "vector_index/internal.h"])
def test_the_checker_reads_the_include_lines_of_the_real_tree(header):
    """The checker sees the includes that make the layers (a test of the test)."""
    graph = includes(CSRC)
    assert header in graph["vector_index/knn.c"]


def test_the_architecture_map_names_every_c_file_once():
    """docs/architecture.md's map of the C library (the block under "The C library") names
    every file of csrc/ once, each with what it holds."""
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## The C library\n", 1)[1]
    block = section.split("```\n", 2)[1]
    lines = block.splitlines()
    assert lines[0] == "csrc/"
    named, folder = [], ""
    for line in lines[1:]:
        m = re.match(r"( {2}| {4})(?=\S)([\w.]+/|[\w.]+(?:, [\w.]+)*)(?:  +\S.*)?$", line)
        if not m:
            assert line.startswith(" " * 6), f"not a file of the map, nor its role: {line!r}"
            continue
        indent, names = m.groups()
        if names.endswith("/"):
            folder = names
            continue
        prefix = folder if len(indent) == 4 else ""
        if len(indent) == 2:
            folder = ""
        named += [prefix + name for name in names.split(", ")]
    assert len(named) == len(set(named)), "a file is named twice"
    assert sorted(named) == sources(CSRC)
