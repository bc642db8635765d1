"""The package's layers (issue 40): import-linter checks pyproject's [tool.importlinter]
contracts, which a wrong import breaks, and the module paths the package had before it was laid
out by concern still import, each as the very module of its new home."""

import importlib
import os
import pickle
import re
import shutil
import subprocess
import sys

import pytest

import hybridsql

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The command beside this Python (the venv's), as pip installed it with the test extra.
LINT_IMPORTS = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def lint_imports(cwd) -> subprocess.CompletedProcess:
    """``lint-imports`` on the package and the contracts of ``cwd`` (which it puts first on
    sys.path), without the cache it would leave there."""
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )


def test_the_package_keeps_its_contracts():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.fixture
def copy(tmp_path):
    """The package's Python source and the contracts, copied to ``tmp_path``, where a test plants
    an import: lint-imports reads the copy (the folder it runs in is first on its path)."""
    shutil.copytree(
        os.path.join(ROOT, "hybridsql"),
        tmp_path / "hybridsql",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.dylib", "*.dll", "data"),
    )
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    return tmp_path


def plant(copy, module: str, line: str) -> None:
    """Appends ``line`` to ``module`` (a path below hybridsql/) of the copy."""
    with open(copy / "hybridsql" / module, "a", encoding="utf-8") as f:
        f.write(f"\n{line}  # planted\n")


LAYERS = "The package's layers, the command line on top and the SQLite file at the bottom"
CIRCLES = "No import circle, between the modules of any package or between packages"
# (what is planted: module, its line; the contracts it breaks; what the report says)
PLANTS = {
    "a lower layer imports a higher one": (
        [("db/schema.py", "from hybridsql.indexing.index import HybridIndex")],
        [LAYERS, CIRCLES],  # indexing imports db: the two packages now import each other
        "hybridsql.db.schema -> hybridsql.indexing.index (l.",
    ),
    "one of two independent siblings imports the other": (
        [("integrations/llamaindex.py", "import hybridsql.integrations.langchain")],
        ["The framework integrations know nothing of each other; two share documents"],
        "hybridsql.integrations.llamaindex -> hybridsql.integrations.langchain (l.",
    ),
    "two modules import each other": (
        [
            ("files/chunking.py", "import hybridsql.files.discovery"),
            ("files/discovery.py", "import hybridsql.files.chunking"),
        ],
        [CIRCLES],
        "No cycles are allowed in hybridsql.files.",
    ),
    "a module with no layer": ([("helpers.py", "import os")], [LAYERS], "hybridsql.helpers"),
}


@pytest.mark.parametrize("case", PLANTS)
def test_the_contracts_fail_a_planted_import(copy, case):
    planted, broken, said = PLANTS[case]
    kept = lint_imports(copy)
    assert kept.returncode == 0, kept.stdout + kept.stderr  # the copy itself keeps them all
    for module, line in planted:
        plant(copy, module, line)
    done = lint_imports(copy)
    assert done.returncode == 1, done.stdout + done.stderr
    # Each contract's line: NAME KEPT or NAME BROKEN, then (N ignored imports) where it has some.
    found = re.findall(r"^(.+) BROKEN(?: \(\d+ ignored imports\))?$", done.stdout, re.MULTILINE)
    assert found == broken
    assert said in done.stdout


def test_each_old_path_is_the_module_of_its_new_home():
    for old, new in hybridsql._MOVED.items():
        module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        assert sys.modules[old] is sys.modules[new], old
        assert module.__name__ == module.__spec__.name == new, old


def test_the_old_paths_import_first_in_a_new_process():
    """Imported by the old path before the new one (a user's script, an entry point installed
    before the move), from either form of import."""
    code = (
        "import pickle, hybridsql.index\n"
        "from hybridsql.langchain import HybridSQLVectorStore\n"
        "from hybridsql import replication\n"
        "import hybridsql.indexing.index as index, hybridsql.integrations.langchain as lc\n"
        "import hybridsql.db.replication as real\n"
        "assert hybridsql.index is index and HybridSQLVectorStore is lc.HybridSQLVectorStore\n"
        "assert replication is real and hybridsql.replication is real\n"
        "print(index.__spec__.name, sorted(n for n in hybridsql._MOVED if n in __import__('sys')"
        ".modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.__file__),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "hybridsql.indexing.index",
        "['hybridsql.index',",
        "'hybridsql.langchain',",
        "'hybridsql.replication']",
    ]


def test_an_old_path_is_patched_and_unpickled_as_its_new_home(monkeypatch):
    import hybridsql.index as old

    import hybridsql.indexing.index as new

    monkeypatch.setattr(old, "READ_AHEAD", 3)
    assert new.READ_AHEAD == 3
    report = new.IndexReport(files_seen=7)
    # A pickle written before the move names the class by its old module.
    before = pickle.dumps(report, protocol=0).replace(
        b"hybridsql.indexing.index", b"hybridsql.index"
    )
    assert b"hybridsql.index\n" in before
    again = pickle.loads(before)
    assert isinstance(again, hybridsql.IndexReport) and again.files_seen == 7


def test_a_name_that_never_was_a_module_is_still_not_found():
    with pytest.raises(ModuleNotFoundError, match="No module named 'hybridsql.no_such_module'"):
        importlib.import_module("hybridsql.no_such_module")
