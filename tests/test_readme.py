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


def test_the_readme_python_block_runs_outside_the_checkout(tmp_path):
    copy_checkout(tmp_path, source_folder=False)
    out = run_python(readme_python_block(), tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 5 and all(
        re.fullmatch(r"\d\.\d{3} \S+:\d+-\d+ \w+", line) for line in lines
    )


def test_the_readme_python_block_in_the_checkout_says_why_it_cannot_write(tmp_path):
    """From the root of a clone, Python imports the source folder, which has no built library:
    the error says so, and what to do, in its one line."""
    copy_checkout(tmp_path, source_folder=True)
    out = run_python(readme_python_block(), tmp_path)
    package = tmp_path / "hybridsql"
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == (
        "hybridsql.errors.IndexingError: writing an index needs hybridsql's native extension:"
        f" hybridsql was imported from its source folder {package}, where the native extension"
        " is not built (hybridsql.so): run Python from another folder to use the installed"
        " package, or build it in place with `pip install -e .`"
    )
