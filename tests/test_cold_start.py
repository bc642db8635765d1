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
