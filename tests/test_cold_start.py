"""A CLI call is a cold start: --version and --help must not import the heavy modules
(issue 25, item 6). Asserts on the modules imported (python -X importtime), never on time."""

import json
import os
import subprocess
import sys

import pytest
from conftest import HYBRIDSQL

HEAVY = ("numpy", "onnxruntime", "apsw", "tokenizers")


def imported(*args: str) -> set:
    """The top-level modules ``hybridsql ARGS`` (the installed command) imported, from -X
    importtime."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run(
        [HYBRIDSQL, *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "hybridsql" in names  # the profile was read
    return names


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("search", "--help")])
def test_version_and_help_import_nothing_heavy(args):
    assert sorted(set(HEAVY) & imported(*args)) == []


def test_import_hybridsql_is_lazy_and_keeps_its_names():
    code = (
        "import sys, hybridsql; heavy = sorted(set(sys.argv[1:]) & set(sys.modules));"
        "names = [n for n in hybridsql.__all__ if getattr(hybridsql, n, None) is None];"
        "print(heavy, names)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *HEAVY],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.__file__),
    )
    assert done.stdout.strip() == "[] []"


def test_keyword_search_imports_no_numpy_nor_model(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Alpha\n\nThe quick brown fox jumps over sqlite.\n")
    db = str(tmp_path / "k.db")
    subprocess.run(
        [HYBRIDSQL, "index", str(notes), "--db", db, "--embedder", "none"],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    names = imported("search", "fox", "--db", db, "--mode", "keyword")
    assert "apsw" in names  # the search did open the database
    assert sorted({"numpy", "onnxruntime", "tokenizers"} & names) == []


def test_first_connect_parses_no_c_declarations(tmp_path):
    """hybridsql.connect loads the extension into SQLite; cffi, which parsed the kernels'
    declarations at import (more than half of a new process's first connect), is imported at
    the first kernel call instead, and the Python functions only where the extension fails."""
    code = (
        "import sys, hybridsql; conn = hybridsql.connect(sys.argv[1]);"
        "print(hybridsql.backend_of(conn), sorted(set(sys.argv[2:]) & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "m.db"), "cffi", "pycparser", "numpy"],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.__file__),
    )
    assert done.stdout.strip() == "extension []"


def test_hybrid_search_imports_neither_onnxruntime_nor_numpy(tmp_path):
    """The query's vector comes from the extension's embed() (csrc/model/model.c), in SQL."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Alpha\n\nThe quick brown fox jumps over sqlite.\n")
    db = str(tmp_path / "h.db")
    subprocess.run(
        [HYBRIDSQL, "index", str(notes), "--db", db, "--embedder", "local"],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    names = imported("search", "a fast animal", "--db", db)
    assert "apsw" in names
    assert sorted({"numpy", "onnxruntime", "tokenizers", "cffi"} & names) == []
    found = subprocess.run(
        [HYBRIDSQL, "search", "a fast animal", "--db", db, "--json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert json.loads(found)["mode"] == "hybrid"


# What each command may import (issue 42): the package's modules, and the top-level packages from
# outside the standard library, by name; the standard library's by count, over what a bare
# `python -c pass` of the same interpreter imports (their names move between Python versions).
# A command that needs more is a change to this list, made on purpose.
SEARCH_MODULES = {
    *("hybridsql", "hybridsql.__main__", "hybridsql.cli", "hybridsql.errors", "hybridsql.locking"),
    *("hybridsql.options", "hybridsql.db", "hybridsql.db._native", "hybridsql.db.extension"),
    *("hybridsql.db.functions", "hybridsql.db.schema", "hybridsql.embedding"),
    *("hybridsql.embedding.embedder", "hybridsql.embedding.engine"),
    # the index's model, chosen as the index opens (issue 41): its record read, its name known
    *("hybridsql.embedding.choice", "hybridsql.embedding.models"),
    *("hybridsql.embedding.local_model", "hybridsql.embedding.providers"),
    *("hybridsql.embedding.threads", "hybridsql.embedding.windows", "hybridsql.files"),
    *("hybridsql.files.chunking", "hybridsql.files.discovery", "hybridsql.indexing"),
    *("hybridsql.indexing.index", "hybridsql.memory", "hybridsql.memory.ranking"),
    *("hybridsql.memory.recall", "hybridsql.memory.records", "hybridsql.memory.state"),
    *("hybridsql.search", "hybridsql.search.files", "hybridsql.search.keywords"),
    *("hybridsql.search.options", "hybridsql.search.results", "hybridsql.search.searcher"),
    *("hybridsql.search.snippets", "hybridsql.search.statement"),
}
ALLOWED = {
    # 7 of the standard library's under an editable install, whose finder has imported the rest
    # before `pass`; 17 under a plain one (threading and ctypes bring collections, functools...)
    "--version": (
        {"hybridsql", "hybridsql.__main__", "hybridsql.db", "hybridsql.db._native"},
        set(),
        20,
    ),
    # 51 under an editable install, 98 under a plain one (Python 3.11): apsw, click, json,
    # hashlib, logging... that the editable finder's imports do not already hold
    "search --mode keyword": (SEARCH_MODULES, {"click", "apsw"}, 110),
    "search (hybrid)": (SEARCH_MODULES, {"click", "apsw"}, 110),
}


# The installed command's own lines (pip's console script), then sys.modules written at exit.
COMMAND = """
import atexit, sys
atexit.register(lambda: print(" ".join(sys.modules), file=sys.stderr))
if sys.argv[1:] != ["pass"]:
    from hybridsql.__main__ import main
    sys.exit(main())
"""


def import_set(*args: str) -> set:
    """The modules a new ``hybridsql ARGS`` holds as it exits (``pass``: a bare interpreter)."""
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.__file__),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(done.stderr.splitlines()[-1].split())


@pytest.fixture(scope="module")
def command_lines(tmp_path_factory):
    """Each command of ALLOWED as run, on a keyword index and a hybrid one of one note."""
    tmp = tmp_path_factory.mktemp("imports")
    notes = tmp / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Alpha\n\nThe quick brown fox jumps over sqlite.\n")
    dbs = {}
    for embedder in ("none", "local"):
        dbs[embedder] = str(tmp / f"{embedder}.db")
        subprocess.run(
            [HYBRIDSQL, "index", str(notes), "--db", dbs[embedder], "--embedder", embedder],
            check=True,
            capture_output=True,
        )
    return {
        "--version": ["--version"],
        "search --mode keyword": ["search", "fox", "--db", dbs["none"], "--mode", "keyword"],
        "search (hybrid)": ["search", "fox", "--db", dbs["local"]],
    }


@pytest.mark.parametrize("command", list(ALLOWED))
def test_each_command_imports_only_what_it_uses(command, command_lines):
    """``hybridsql --version`` is answered before the command line is built (__main__.py): no
    click, no search, no cffi parser. A search imports the search and the index, not pathspec
    (which only indexing reads), HTTP (only the OpenAI provider) or the terminal module (only
    a terminal's output)."""
    ours, others, most = ALLOWED[command]
    found = import_set(*command_lines[command]) - import_set("pass")
    package = {m for m in found if m.split(".")[0] == "hybridsql"}
    outside = {m.split(".")[0] for m in found if m.split(".")[0] not in sys.stdlib_module_names} - {
        "hybridsql"
    }
    standard = {m for m in found if m.split(".")[0] in sys.stdlib_module_names}
    assert sorted(package - ours) == []
    assert sorted(outside - others) == []
    assert len(standard) <= most, sorted(standard)
