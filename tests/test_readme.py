"""The searches examples/README.md shows, run as written: each finds what the README says it
finds, on any day (each states --now, or leaves decay out)."""

import json
import os
import re
import shlex

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
