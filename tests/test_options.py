"""A search's options are declared once (SearchOptions, MemorySearch) and reach the command line
and the MCP tool's schema with the same names, defaults and help."""

import asyncio
import json
import re
from dataclasses import fields

import click
import pytest

from hybridsql.cli import cli, main
from hybridsql.errors import QueryError
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemorySearch, MemoryStore
from hybridsql.search import SearchOptions


def options_of(*path):
    command = cli
    for name in path:
        command = command.commands[name]
    return {p.name: p for p in command.params if isinstance(p, click.Option)}


@pytest.mark.parametrize(
    ("path", "cls"), [(["search"], SearchOptions), (["memory", "search"], MemorySearch)]
)
def test_every_field_is_an_option_with_its_default_and_help(path, cls):
    options = options_of(*path)
    for f in fields(cls):
        assert f.name in options, f.name
        assert options[f.name].default == f.default, f.name
        assert options[f.name].help == f.metadata["help"], f.name


def test_the_search_memory_tool_takes_every_field_but_where_recalls_go(tmp_path):
    from hybridsql.mcp.server import build_server

    with HybridIndex(str(tmp_path / "m.db"), embedder="none") as index:
        store = MemoryStore(index)
        server = build_server(store, store.start_session("p").id)
        tools = {t.name: t for t in asyncio.run(server.list_tools())}
    schema = tools["search_memory"].input_schema["properties"]
    for f in fields(MemorySearch):
        if f.name == "recalled_in":  # the server's own session
            assert f.name not in schema
            continue
        assert schema[f.name]["description"] == f.metadata["help"], f.name
        assert schema[f.name]["default"] == f.default, f.name
    assert schema["sector"]["anyOf"][0]["enum"] == [
        "episodic",
        "semantic",
        "procedural",
        "emotional",
        "reflective",
    ]
    assert {"query", "documents", "decay", "group_by_file"} <= set(schema)


def test_a_flag_reaches_the_search(tmp_path, capsys):
    db = str(tmp_path / "m.db")
    for text in ("deploys are frozen", "deploy freeze"):
        assert (
            main(["memory", "add", text, "--project", "p", "--db", db, "--embedder", "none"]) == 0
        )
    capsys.readouterr()
    argv = ["memory", "search", "deploy", "--db", db, "--embedder", "none", "--json"]
    assert main([*argv, "-n", "1", "--no-reinforce"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert len(found["results"]) == 1
    assert main([*argv, "--project", "other"]) == 0
    assert json.loads(capsys.readouterr().out)["results"] == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_score": 2}, "min_score must be from 0 to 1, the highest relevance, not 2"),
        ({"min_score": -0.1}, "min_score must be from 0 to 1, the highest relevance, not -0.1"),
        (
            {"min_score": 1.5, "fusion": "rrf", "vector_weight": 1.0, "keyword_weight": 1.0},
            "min_score must be from 0 to 1, the highest relevance, not 1.5",
        ),
        (
            {"min_score": 2.5, "vector_weight": 1.0, "keyword_weight": 1.0},
            "min_score must be from 0 to 2, the highest relevance, not 2.5",
        ),
    ],
)
def test_a_min_score_no_relevance_reaches_is_refused(tmp_path, options, message):
    """Issue 34, item 14: min_score=2 was taken, and every search then returned nothing."""
    with HybridIndex(str(tmp_path / "m.db"), embedder="none") as index:
        with pytest.raises(QueryError, match=re.escape(message)):
            index.search("deploy", mode="keyword", **options)
        for fine in (0, 1.0, {"min_score": 1.5, "vector_weight": 1.0, "keyword_weight": 1.0}):
            SearchOptions(**(fine if isinstance(fine, dict) else {"min_score": fine})).check()
