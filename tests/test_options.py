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


def other_value(f):
    """A value of field ``f`` other than its default, as the command line writes it, and as
    the field then holds it."""
    if f.metadata["choices"]:
        value = next(c for c in f.metadata["choices"] if c != f.default)
        return value, value
    if isinstance(f.default, bool):
        return None, not f.default
    if isinstance(f.default, int):
        return str(f.default + 3), f.default + 3
    if isinstance(f.default, float):
        return str(f.default / 2), f.default / 2
    if f.name == "now":
        return "2026-11-22", "2026-11-22"
    if f.name == "project":
        return "tide", "tide"
    return "7", 7  # the optional integers: session ids


@pytest.mark.parametrize(
    ("path", "cls"), [(["search"], SearchOptions), (["memory", "search"], MemorySearch)]
)
def test_every_field_is_the_flag_of_its_own_name_and_the_old_flags_are_aliases(path, cls):
    """Issue 39, item 11: the README says every option is a keyword argument and a flag of
    the same name, and `half_life_days` was `--half-life`, `candidate_pool` `--pool` (and
    `--candidate-pool` said "No such option"). Each flag is derived here from the field's name
    and parsed; the flags of before still reach the same field."""
    command = cli
    for name in path:
        command = command.commands[name]
    aliases = 0
    for f in fields(cls):
        given, held = other_value(f)
        own = "--" + f.name.replace("_", "-")
        if given is None:  # a switch: --name, or --no-name where it is on by default
            flags = [own if not f.default else "--no-" + own[2:]]
            argv = [[flags[0]]]
        else:
            flags = [own, *f.metadata["aliases"]]
            argv = [[each, given] for each in flags]
            aliases += len(f.metadata["aliases"])
        for args in argv:
            ctx = command.make_context(command.name, ["q", "--db", "x.db", *args])
            assert ctx.params[f.name] == held, (f.name, args)
    assert aliases == {SearchOptions: 2, MemorySearch: 1}[cls]


def test_the_readmes_search_options_are_fields_and_flags_of_their_names():
    """The README's list of search options, each a field of SearchOptions and a flag of
    `hybridsql search` spelt as it is."""
    from conftest import ROOT

    with open(f"{ROOT}/README.md", encoding="utf-8") as f:
        text = f.read()
    said = re.search(r"Every search option \((.*?)\) is a\s+keyword argument", text, re.S)
    names = re.findall(r"`(\w+)`", said.group(1))
    assert len(names) >= 10
    opts = {o for p in options_of("search").values() for o in p.opts + p.secondary_opts}
    for name in names:
        assert name in {f.name for f in fields(SearchOptions)}, name
        assert "--" + name.replace("_", "-") in opts, name


def test_a_search_by_the_new_flags_and_by_the_old_finds_the_same(tmp_path, capsys):
    db = str(tmp_path / "m.db")
    assert main(["memory", "add", "deploys are frozen", "--db", db, "--embedder", "none"]) == 0
    capsys.readouterr()
    found = []
    for flags in (["--half-life-days", "3", "--candidate-pool", "5"], ["--half-life", "3", "--pool", "5"]):  # fmt: skip
        argv = ["search", "deploy", "--db", db, "--embedder", "none", "--now", "1e9", *flags]
        assert main([*argv, "--explain"]) == 0
        found.append(capsys.readouterr().out)
    assert found[0] == found[1] and "3.0" in found[0]


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
