"""One name per concept (issue 27, item 3): how many results a search returns is ``limit``
(``--limit``, ``-n``) everywhere, in Python, on the command line and in the MCP tools; the old
``max_results`` / ``--max-results`` still work for one release and say that they are going."""

import json
import re
import shutil
import warnings
from dataclasses import fields

import pytest
from conftest import run_hybridsql

from hybridsql import HybridIndex, MemorySearch, SearchOptions
from hybridsql.cli import cli

OLD = "max_results is deprecated, use limit; it goes in 0.2.0"
OLD_FLAG = "--max-results is deprecated, use --limit (-n); it goes in 0.2.0"


@pytest.fixture(scope="module")
def db(example_db, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("names") / "mem.db")
    shutil.copy(example_db, path)
    return path


def found(*args: str) -> list:
    done = run_hybridsql(*args)
    assert done.returncode == 0, done.stderr
    return [(r["path"], r["start_line"]) for r in json.loads(done.stdout)["results"]]


def test_every_count_of_results_is_called_limit():
    """The fields, the flags and the MCP tools' parameters: limit, -n; no max_results."""
    assert "limit" in {f.name for f in fields(SearchOptions)}
    assert "limit" in {f.name for f in fields(MemorySearch)}
    assert "max_results" not in {f.name for f in fields(SearchOptions)}
    commands = {
        "search": cli.commands["search"],
        "memory search": cli.commands["memory"].commands["search"],
        "memory recent": cli.commands["memory"].commands["recent"],
        "memory documents": cli.commands["memory"].commands["documents"],
    }
    for name, command in commands.items():
        shown = [p for p in command.params if not getattr(p, "hidden", False)]
        counts = [p.opts for p in shown if "-n" in p.opts]
        assert counts == [["--limit", "-n"]], name
        assert not [p for p in shown if "max" in p.name and "chars" not in p.name], name


def test_the_mcp_tools_name_a_count_of_memories_limit():
    pytest.importorskip("mcp")
    import asyncio

    from hybridsql.mcp.server import build_server

    tools = asyncio.run(build_server(lambda *args, **kwargs: None).list_tools())
    params = {t.name: set(t.input_schema["properties"]) for t in tools}
    assert "limit" in params["search_memory"] and "limit" in params["recent_memories"]
    assert not [t for t, names in params.items() if "max_results" in names]


def test_the_old_flag_still_works_and_says_it_is_going(db):
    new = found("search", "deploy", "--db", db, "--no-decay", "--limit", "3")
    assert len(new) == 3
    done = run_hybridsql("search", "deploy", "--db", db, "--no-decay", "--max-results", "3")
    assert done.returncode == 0
    assert done.stderr == f"hybridsql search: {OLD_FLAG}\n"
    assert [(r["path"], r["start_line"]) for r in json.loads(done.stdout)["results"]] == new


def test_the_old_flag_and_the_new_one_together_are_refused(db):
    done = run_hybridsql("search", "deploy", "--db", db, "--max-results", "3", "-n", "4")
    assert done.returncode == 2
    assert done.stderr == (
        "hybridsql search: --max-results is the old name of --limit: give --limit alone"
        " (see hybridsql search --help)\n"
    )


def test_the_old_keyword_still_works_and_warns(db):
    with HybridIndex(db, readonly=True, embedder="none") as idx:
        new = [(r.path, r.start_line) for r in idx.search("deploy", limit=3, decay=False)]
        with pytest.warns(DeprecationWarning, match=re.escape(OLD)) as caught:
            old = [(r.path, r.start_line) for r in idx.search("deploy", max_results=3, decay=False)]
    assert old == new and len(new) == 3
    assert caught[0].filename == __file__  # the warning points at the caller's line
    with pytest.warns(DeprecationWarning, match=re.escape(OLD)):
        assert SearchOptions(max_results=4).limit == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert SearchOptions(limit=4).limit == 4  # the new name warns nothing


def test_the_old_keyword_and_the_new_one_together_are_refused():
    from hybridsql.errors import QueryError

    with pytest.raises(
        QueryError, match=re.escape("max_results is the old name of limit: give limit alone")
    ):
        SearchOptions(limit=3, max_results=4)
