"""The searches examples/README.md shows, run as written: each finds what the README says it
finds, on any day (each states --now, or leaves decay out)."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from hybridsql.cli import main

ROW = re.compile(r"^\| `(hybridsql search [^`]+)` \| (.+) \|$", re.MULTILINE)


def readme_rows():
    with open(os.path.join(ROOT, "examples", "README.md"), encoding="utf-8") as f:
        text = f.read()
    rows = [(command, re.findall(r"`([^`]+)`", first)) for command, first in ROW.findall(text)]
    assert len(rows) >= 8, "examples/README.md lost its table of searches"
    return rows


@pytest.mark.parametrize(("command", "first"), readme_rows())
def test_the_examples_readme_search_finds_what_it_says(command, first, example_db, capsys):
    argv = shlex.split(command.replace("--db mem.db", f"--db {shlex.quote(example_db)}"))
    assert main([*argv[1:], "--embedder", "local"]) == 0
    found = [r["path"] for r in json.loads(capsys.readouterr().out)["results"]]
    assert found[: len(first)] == first
    if "--group-by-file" in argv:
        assert len(set(found)) == len(found)


def readme_python_block():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"^```python\n(.*?)^```$", f.read(), re.MULTILINE | re.DOTALL)
    assert blocks, "README.md lost its Python example"
    return blocks[0]


def copy_checkout(into, source_folder: bool):
    """What the README's Python block reads from the checkout (examples/), and, when
    ``source_folder``, the package's source folder as a clone has it (no built library)."""
    shutil.copytree(os.path.join(ROOT, "examples"), os.path.join(into, "examples"))
    if source_folder:
        no_build = shutil.ignore_patterns("*.so", "*.dylib", "*.dll", "*.pyd", "__pycache__")
        shutil.copytree(
            os.path.join(ROOT, "hybridsql"), os.path.join(into, "hybridsql"), ignore=no_build
        )
        shutil.copytree(os.path.join(ROOT, "csrc"), os.path.join(into, "csrc"))


def run_python(code, cwd):
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_readme_python_block_runs_as_written_in_another_folder(tmp_path):
    """In a folder with nothing of the checkout (it used examples/memory, a path relative to
    the checkout's root, and failed elsewhere leaving an empty mem.db): it prints what the
    README shows under it."""
    code = readme_python_block()
    shown = [line[2:] for line in code.splitlines() if re.fullmatch(r"# \d\.\d{3} .*", line)]
    out = run_python(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == shown and shown
    again = run_python(code, tmp_path)  # incremental: the second run finds the same
    assert again.stdout == out.stdout


NEEDS_NATIVE = (
    "hybridsql.errors.IndexingError: writing an index needs hybridsql's native extension:"
    " hybridsql was imported from its source folder {package}, where the native extension"
    " is not built (hybridsql.so): run Python from another folder to use the installed"
    " package, or build it in place with `pip install -e .`"
)


def test_the_readme_python_block_in_the_checkout_says_why_it_cannot_write(tmp_path):
    """From the root of a clone, Python imports the source folder, which has no built library:
    the error says so, and what to do, in its one line."""
    copy_checkout(tmp_path, source_folder=True)
    out = run_python(readme_python_block(), tmp_path)
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == NEEDS_NATIVE.format(package=tmp_path / "hybridsql")


def test_the_readme_python_block_in_the_checkout_says_why_beside_an_index_made_before(
    tmp_path, example_db
):
    """The same where the index exists already (the README's first command makes one in the
    checkout's root): the one line, not apsw's `no such module: vector_index` mid-write."""
    copy_checkout(tmp_path, source_folder=True)
    shutil.copyfile(example_db, tmp_path / "notes.db")
    out = run_python(readme_python_block(), tmp_path)
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == NEEDS_NATIVE.format(package=tmp_path / "hybridsql")


def test_a_search_from_the_checkout_of_an_index_with_vectors_is_keyword_only_with_the_line(
    tmp_path, example_db
):
    """An index that records the local model, searched from a clone's root (the source folder,
    no library, so no engine): a keyword search that says why, not an AttributeError from the
    library that is not there (CI, 2026-11-29: the model's header read through a missing lib)."""
    copy_checkout(tmp_path, source_folder=True)
    shutil.copyfile(example_db, tmp_path / "notes.db")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "hybridsql",
            "search",
            "deploy freeze",
            "--db",
            "notes.db",
            "--json",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout)
    assert found["mode"] == "keyword" and found["results"]
    line = f"imported from its source folder {tmp_path / 'hybridsql'}, where the native extension"
    assert any(line in note for note in found["notes"]), found["notes"]
