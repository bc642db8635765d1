"""The MCP server, driven by a real MCP client session over stdio: the SDK's stdio client
launches the installed ``hybridsql mcp ...`` and calls every tool, while and after the server
indexes its memory folder in the background."""

import contextlib
import importlib.metadata
import json
import os
import re
import select
import shutil
import subprocess
import sys
import urllib.parse

import anyio
import pytest
from conftest import DEADLINE, HYBRIDSQL, ROOT, spawned
from mcp import ClientSession, StdioServerParameters, stdio_client

import hybridsql
from hybridsql.indexing.index import HybridIndex
from hybridsql.mcp.server import TOOLS
from hybridsql.memory import MemoryStore  # noqa: E402


@pytest.fixture
def folder(tmp_path):
    """A small memory folder: one long-lived file and one project note."""
    root = tmp_path / "agent-memory"
    (root / "memory" / "projects" / "billing").mkdir(parents=True)
    (root / "MEMORY.md").write_text(
        "# MEMORY\n\n## Style\n- Maya wants 4 spaces in Python, never tabs.\n"
    )
    (root / "memory" / "projects" / "billing" / "glossary.md").write_text(
        "# Billing glossary\n\n## Dunning\nDunning is the reminder sequence for unpaid invoices.\n"
    )
    return root


class Client:
    """Calls tools and decodes their JSON answers; ``init`` is the server's answer to initialize."""

    def __init__(self, session, init):
        self.session = session
        self.init = init

    async def call(self, tool, **arguments):
        result = await self.session.call_tool(tool, arguments)
        text = result.content[0].text
        if result.is_error:
            return {"error": text}
        return json.loads(text)

    async def indexed(self):
        """Waits for the server's background indexing to end; returns the notes of a search
        that then only looks (no salience, no link to the session)."""
        with anyio.fail_after(300):
            while True:
                found = await self.call("search_memory", query="x", documents=0, reinforce=False)
                if not any(note.startswith("indexing: ") for note in found["notes"]):
                    return found["notes"]
                await anyio.sleep(0.05)


def run_session(db, folder, steps, embedder="local", env=None):
    """Starts the server as a subprocess, runs ``steps(client, session)`` in one MCP session."""
    params = StdioServerParameters(
        command=HYBRIDSQL,
        args=[
            "mcp",
            "--db",
            db,
            "--memory-dir",
            str(folder),
            "--project",
            "tide",
            "--embedder",
            embedder,
        ],
        # all of os.environ: the SDK passes a short list (no LD_PRELOAD) otherwise
        env={**os.environ, **(env or {})},
    )

    async def main():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            return await steps(Client(session, init), session)

    return anyio.run(main)


def test_an_mcp_client_uses_every_tool(tmp_path, folder):
    db = str(tmp_path / "mcp.db")

    async def steps(client, session):
        listed = await session.list_tools()
        seen = {"tools": sorted(t.name for t in listed.tools), "version": client.init.server_info}
        seen["indexed"] = await client.indexed()
        a = await client.call(
            "add", content="Deploys need a green staging run", sector="procedural", salience=0.6
        )
        b = await client.call(
            "add",
            content="Billing runs dunning emails every Monday",
            project="billing",
            sector="episodic",
        )
        seen["added"] = (a, b)
        seen["search"] = await client.call("search_memory", query="deploy staging")
        seen["newer"] = await client.call(
            "supersede", memory_id=a["id"], content="Deploys need a green staging run and a canary"
        )
        seen["default"] = await client.call("search_memory", query="deploy staging")
        seen["all"] = await client.call(
            "search_memory", query="deploy staging", include_superseded=True, documents=0
        )
        seen["reinforced"] = await client.call("reinforce", memory_id=b["id"], amount=0.3)
        seen["timeline"] = await client.call("timeline", memory_id=seen["newer"]["id"])
        seen["recent"] = await client.call("recent_memories", limit=5)
        seen["recent_billing"] = await client.call("recent_memories", project="billing")
        seen["extracted"] = await client.call(
            "extract_memory",
            topic="deploys",
            title="Canary first",
            content="Roll out to 5 % of pods first.",
            tags=["deploy"],
        )
        seen["documents"] = await client.call("search_memory", query="canary pods")
        seen["billing"] = await client.call(
            "search_memory", query="dunning", project="billing", sector="episodic"
        )
        seen["looked"] = await client.call(
            "search_memory", query="dunning", reinforce=False, decay=False, group_by_file=True
        )
        seen["deleted"] = await client.call("delete", memory_id=b["id"])
        seen["after_delete"] = await client.call("search_memory", query="dunning")
        seen["unknown"] = await client.call("timeline", memory_id=999)
        seen["bad_sector"] = await client.call("add", content="x", sector="factual")
        seen["bad_salience"] = await client.call("add", content="x", salience=3)
        return seen

    seen = run_session(db, folder, steps)
    assert seen["tools"] == sorted(TOOLS)
    assert (seen["version"].name, seen["version"].version) == ("hybridsql", hybridsql.__version__)
    assert seen["indexed"] == []
    a, b = seen["added"]
    assert (a["project"], a["sector"], a["salience"]) == ("tide", "procedural", 0.6)
    assert b["project"] == "billing"

    hits = seen["search"]["memories"]
    assert [h["memory"]["id"] for h in hits] == [a["id"]]
    assert hits[0]["match_type"] == "both" and "<mark>" in hits[0]["snippet"]
    assert hits[0]["source_session"] == 1
    newer = seen["newer"]
    assert [h["memory"]["id"] for h in seen["default"]["memories"]] == [newer["id"]]
    everything = seen["all"]["memories"]
    assert [h["memory"]["id"] for h in everything] == [newer["id"], a["id"]]
    assert everything[1]["is_superseded"]
    assert everything[1]["superseded_by"]["id"] == newer["id"]
    assert everything[1]["related_count"] == 1
    assert seen["all"]["documents"] == []

    assert seen["reinforced"]["salience"] == pytest.approx(0.8)
    timeline = seen["timeline"]["entries"]
    assert [(e["offset"], e["memory"]["id"]) for e in timeline] == [(-1, a["id"]), (0, newer["id"])]
    assert {e["session"]["id"] for e in timeline} == {1}
    recent = seen["recent"]["entries"]  # the superseded one left out, and nothing reinforced
    assert [(e["offset"], e["memory"]["id"]) for e in recent] == [(0, newer["id"])]
    assert [e["memory"]["id"] for e in seen["recent_billing"]["entries"]] == [b["id"]]
    assert seen["recent_billing"]["entries"][0]["memory"]["salience"] == pytest.approx(0.8)

    extracted = seen["extracted"]
    assert extracted["path"].startswith("memory/") and extracted["chunk_ids"]
    assert "## Canary first" in (folder / extracted["path"]).read_text()
    documents = seen["documents"]["documents"]
    assert documents[0]["path"] == extracted["path"] and "<mark>" in documents[0]["snippet"]
    billing = seen["billing"]
    assert [h["memory"]["id"] for h in billing["memories"]] == [b["id"]]
    assert [d["path"] for d in billing["documents"]] == ["memory/projects/billing/glossary.md"]

    looked = seen["looked"]  # found, and neither reinforced nor linked (the summary below)
    # (the same salience but for the few seconds its recall's gain relaxed in between)
    assert [h["memory"]["salience"] for h in looked["memories"]] == [
        pytest.approx(h["memory"]["salience"], abs=1e-6) for h in billing["memories"]
    ]
    assert [(d["path"], d["other_ranges"]) for d in looked["documents"]] == [
        ("memory/projects/billing/glossary.md", [])
    ]

    assert seen["deleted"] == {"deleted": b["id"], "hard": False}
    assert seen["after_delete"]["memories"] == []
    assert "no memory with id 999" in seen["unknown"]["error"]
    assert "sector" in seen["bad_sector"]["error"]
    assert "salience must be in [0, 1], not 3" in seen["bad_salience"]["error"]

    # The server's process was one session: it holds what the tools did, and it was closed.
    with HybridIndex(db, embedder="none") as idx:
        store = MemoryStore(idx)
        session = store.get_session(1)
        assert session.project == "tide" and session.ended_at is not None
        assert session.summary == "MCP session: created 3, recalled 6, reinforced 1, updated 1"
        context = store.session_context(newer["id"])
        assert (context.session.id, context.usage) == (1, "recalled")


def test_the_server_answers_while_it_indexes_and_searches_see_the_files_once_indexed(
    tmp_path, folder, embedding_server
):
    """The embedding server holds the indexer's batch (it has the glossary's text) until the
    test releases it: initialize and a search are answered while indexing is still going."""
    embedding_server.hold = "unpaid invoices"
    env = {
        "HYBRIDSQL_OPENAI_BASE_URL": embedding_server.base_url,
        "HYBRIDSQL_OPENAI_MODEL": "letters",
    }

    async def steps(client, session):
        await anyio.to_thread.run_sync(embedding_server.holding.wait)
        during = await client.call("search_memory", query="dunning invoices")
        embedding_server.release.set()
        notes = await client.indexed()
        after = await client.call("search_memory", query="dunning invoices")
        return during, notes, after

    during, notes, after = run_session(
        str(tmp_path / "mcp.db"), folder, steps, embedder="openai", env=env
    )
    assert during["documents"] == []
    assert during["notes"] == ["indexing: 0 of 2 files; documents found are those indexed so far"]
    assert notes == []
    assert after["notes"] == []
    assert after["documents"][0]["path"] == "memory/projects/billing/glossary.md"
    assert "<mark>Dunning</mark>" in after["documents"][0]["snippet"]


def test_a_search_says_that_indexing_failed_and_where(tmp_path, folder, embedding_server):
    embedding_server.refuse = "unpaid invoices"
    env = {
        "HYBRIDSQL_OPENAI_BASE_URL": embedding_server.base_url,
        "HYBRIDSQL_OPENAI_MODEL": "letters",
    }

    async def steps(client, session):
        return await client.indexed()

    notes = run_session(str(tmp_path / "mcp.db"), folder, steps, embedder="openai", env=env)
    assert notes == [
        "indexing the memory folder failed after 0 of 2 files: POST "
        f"{embedding_server.base_url}/embeddings answered HTTP 400: refused"
    ]


def readme_client_configurations():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"^```json\n(.*?)^```$", f.read(), re.MULTILINE | re.DOTALL)
    # Those of the HTTP server are run by test_mcp_http.py.
    configurations = [json.loads(block) for block in blocks if '"type": "http"' not in block]
    assert len(configurations) >= 2, "the README lost its MCP client configurations"
    return configurations


@pytest.mark.parametrize("configuration", readme_client_configurations())
def test_a_readme_client_configuration_starts_the_server(tmp_path, folder, configuration):
    (servers,) = (configuration[key] for key in ("mcpServers", "servers") if key in configuration)
    entry = servers["hybridsql"]
    assert entry.get("type", "stdio") == "stdio" and entry["command"] == "hybridsql"
    args = [a.replace("/path/to/agent-memory", str(folder)) for a in entry["args"]]
    params = StdioServerParameters(
        command=HYBRIDSQL,  # the installed one: `hybridsql` on this PATH may be another
        args=args,
        env={**os.environ, "HYBRIDSQL_EMBEDDER": "none", **entry.get("env", {})},
    )

    async def main():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            recent = await session.call_tool("recent_memories", {})
            return init.server_info.name, json.loads(recent.content[0].text)

    assert anyio.run(main) == ("hybridsql", {"entries": []})
    assert (folder / "mem.db").is_file()


def test_answers_stay_within_their_budget_and_say_what_was_cut(tmp_path, folder):
    """Twenty memories of 60,000 characters each: a search, the recent list and a timeline
    answer within max_chars (20,000 by default), the best results first, and say what was cut;
    a memory over the size bound is refused with one line."""
    db = str(tmp_path / "mem.db")
    with HybridIndex(db, embedder="none") as idx:
        store = MemoryStore(idx)
        ids = [store.add(f"deploy note {i} " + "x" * 60_000, "tide").id for i in range(20)]

    async def steps(c, _):
        seen = {"search": await c.call("search_memory", query="deploy note", documents=0)}
        seen["wide"] = await c.call(
            "search_memory", query="deploy note", documents=0, max_chars=200_000
        )
        seen["recent"] = await c.call("recent_memories", limit=20)
        seen["timeline"] = await c.call("timeline", memory_id=ids[10], before=10, after=10)
        seen["small"] = await c.call("recent_memories", max_chars=10)
        seen["huge"] = await c.call("add", content="y" * 100_001)
        return seen

    seen = run_session(db, folder, steps, embedder="none")
    for name, limit in [("search", 20_000), ("wide", 200_000), ("recent", 20_000)]:
        answer = seen[name]
        assert len(json.dumps(answer)) <= limit, name
        assert answer["cut"].startswith(f"cut to max_chars={limit}: "), name
    assert len(json.dumps(seen["timeline"])) <= 20_000 and "cut" in seen["timeline"]
    found = seen["search"]["memories"]
    assert found and all(h["memory"]["content"].endswith("…") for h in found)
    wide = seen["wide"]["memories"]
    assert [h["memory"]["id"] for h in wide[: len(found)]] == [h["memory"]["id"] for h in found]
    assert sum(len(h["memory"]["content"]) for h in wide) > 5 * sum(
        len(h["memory"]["content"]) for h in found
    )
    # the newest first, as without the budget: only the tail is left out
    entries = [e["memory"]["id"] for e in seen["recent"]["entries"]]
    assert entries == list(reversed(ids))[: len(entries)]
    assert seen["small"] == {
        "error": "Error executing tool recent_memories: max_chars must be an integer from 1000 "
        "to 1000000, not 10"
    }
    assert seen["huge"] == {
        "error": "Error executing tool add: a memory holds at most 100,000 characters, this one "
        "has 100,001: store a summary, or write the text to a file in the memory folder "
        "(HYBRIDSQL_MAX_MEMORY_CHARS raises the bound)"
    }


# Each tool's arguments, in the order its error lists them (issue 25, item 7).
TOOL_ARGUMENTS = {
    "search_memory": "query, documents, decay, group_by_file, max_chars, project, sector, tier,"
    " limit, min_salience, include_superseded, session_id, mode, reinforce",
    "extract_memory": "topic, title, content, tags",
    "add": "content, sector, tier, salience, project",
    "supersede": "memory_id, content, salience, project",
    "reinforce": "memory_id, amount, project",
    "timeline": "memory_id, before, after, project, max_chars",
    "recent_memories": "project, limit, include_superseded, max_chars",
    "delete": "memory_id, hard, project",
}


def test_every_tool_refuses_an_unknown_argument_and_names_the_valid_ones(tmp_path, folder):
    db = str(tmp_path / "mcp.db")

    async def steps(client, session):
        listed = sorted(t.name for t in (await session.list_tools()).tools)
        one = {name: await client.call(name, limt=5) for name in listed}
        two = await client.call("add", content="Deploys need a green run", limt=5, sectr="x")
        left = await client.call("recent_memories")
        return listed, one, two, left

    listed, one, two, left = run_session(db, folder, steps, embedder="none")
    assert listed == sorted(TOOL_ARGUMENTS)
    for name, valid in TOOL_ARGUMENTS.items():
        expected = f"{name}: unknown argument 'limt'; valid arguments: {valid}"
        assert one[name] == {"error": expected}
    assert two == {
        "error": "add: unknown arguments 'limt', 'sectr'; valid arguments: " + TOOL_ARGUMENTS["add"]
    }
    assert left == {"entries": []}  # the refused add stored nothing


class RawClient:
    """``hybridsql mcp`` over stdio spoken to in JSON-RPC lines written here: what a client
    may send that the SDK's own client would not (lone surrogate escapes, 1e2, broken JSON)."""

    def __init__(self, db, folder):
        args = [HYBRIDSQL, "mcp", "--db", db, "--memory-dir", str(folder), "--embedder", "none"]
        self.stack = contextlib.ExitStack()
        self.process = self.stack.enter_context(
            spawned(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        )
        self.next_id = 0
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
        hello["clientInfo"] = {"name": "test_mcp", "version": "1"}
        assert "result" in self.request("initialize", json.dumps(hello))
        self.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def send(self, line: str) -> None:
        self.process.stdin.write(line.encode("utf-8") + b"\n")
        self.process.stdin.flush()

    def answer(self, request_id, within=120.0) -> dict:
        """The answer to ``request_id``; fails when none comes within ``within`` seconds (a
        bound on a wait, not a measure of speed: the SDK sent no answer at all)."""
        while True:
            ready, _, _ = select.select([self.process.stdout], [], [], within)
            assert ready, f"no answer to request {request_id} in {within} s"
            line = self.process.stdout.readline()
            assert line, "the server exited"
            answer = json.loads(line)
            if answer.get("id") == request_id:
                return answer

    def request(self, method: str, params: str):
        """``params``: JSON text, written as it is."""
        self.next_id += 1
        self.send(
            f'{{"jsonrpc": "2.0", "id": {self.next_id}, "method": "{method}", "params": {params}}}'
        )
        return self.answer(self.next_id)

    def call(self, tool: str, arguments: str):
        """(is_error, text) of a tool call whose ``arguments`` are JSON text."""
        result = self.request("tools/call", f'{{"name": "{tool}", "arguments": {arguments}}}')
        result = result["result"]
        return result.get("isError", False), result["content"][0]["text"]

    def close(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(timeout=DEADLINE)
        finally:
            self.stack.close()


@pytest.fixture
def notes(tmp_path):
    """An empty memory folder: the first memory added has id 1."""
    (tmp_path / "notes").mkdir()
    return tmp_path / "notes"


@pytest.fixture
def raw(tmp_path, notes):
    client = RawClient(str(tmp_path / "raw.db"), notes)
    yield client
    client.close()


def test_every_request_gets_an_answer_over_stdio(raw, notes):
    """Issue 34, item 13: a request holding a lone surrogate escape got no answer at all (the
    SDK's parser refuses it and drops the line), and the client waited until its timeout. It
    is read as U+FFFD, as invalid UTF-8 is; a line that is no request is answered with an
    error where it has an id; the server keeps answering."""
    added = raw.call("add", '{"content": "deploy \\ud800 freeze"}')
    found = raw.call("search_memory", '{"query": "\\udfff freeze", "documents": 0}')
    extracted = raw.call(
        "extract_memory", '{"topic": "t \\udc80", "title": "Canary \\ud83d", "content": "x"}'
    )
    assert not added[0] and json.loads(added[1])["content"] == "deploy \ufffd freeze"
    assert [h["memory"]["content"] for h in json.loads(found[1])["memories"]] == [
        "deploy \ufffd freeze"
    ]
    assert not extracted[0]
    note = (notes / json.loads(extracted[1])["path"]).read_text(encoding="utf-8")
    assert "## Canary \ufffd\n- topic: t \ufffd\n" in note

    raw.send('{"jsonrpc": "2.0", "id": 90, "method": "tools/call", "params": "no object"}')
    assert raw.answer(90)["error"]["code"] == -32600  # JSON-RPC's invalid request
    raw.send('{"jsonrpc": "2.0", "id": 91, "method": "tools/ca')
    broken = raw.answer(None)
    assert broken["error"]["code"] == -32700  # parse error, id null: the id cannot be read
    assert broken["error"]["message"].startswith("the line is no JSON: ")
    recent = raw.call("recent_memories", "{}")
    assert [e["memory"]["content"] for e in json.loads(recent[1])["entries"]] == [
        "deploy \ufffd freeze"
    ]


def test_arguments_the_schema_does_not_allow_are_refused_with_one_line(raw):
    """Issue 34, item 14: delete {"memory_id": true} deleted memory 1, "1" and 1e2 were read as
    the ids 1 and 100, and tier="bogus" was stored. Item 12: every argument has a bound. Each
    is refused with one line, and nothing is written."""
    first = json.loads(raw.call("add", '{"content": "Deploys freeze on Fridays"}')[1])
    assert first["id"] == 1
    long = "t" * 5_000_000
    refused = {
        ("delete", '{"memory_id": true}'): "delete: memory_id must be an integer, not true",
        ("delete", '{"memory_id": "1"}'): 'delete: memory_id must be an integer, not "1"',
        ("delete", '{"memory_id": 1e2}'): "delete: memory_id must be an integer, not 100.0",
        ("delete", '{"memory_id": 1, "hard": 1}'): "delete: hard must be true or false, not 1",
        ("reinforce", '{"memory_id": 1.0}'): "reinforce: memory_id must be an integer, not 1.0",
        ("timeline", "{}"): "timeline: 'memory_id' must be given",
        ("add", '{"content": "x", "tier": "bogus"}'): (
            'add: tier must be one of session, project, global, not "bogus"'
        ),
        ("add", '{"content": "x", "salience": "0.5"}'): (
            'add: salience must be a number, not "0.5"'
        ),
        ("add", '{"content": ["x"]}'): 'add: content must be text, not ["x"]',
        ("add", f'{{"content": "x", "project": "{"p" * 201}"}}'): (
            "add: project must be at most 200 characters or null, not 201"
        ),
        ("extract_memory", f'{{"topic": "t", "title": "{long}", "content": "x"}}'): (
            "extract_memory: title must be at most 200 characters, not 5,000,000"
        ),
        (
            "extract_memory",
            f'{{"topic": "t", "title": "t", "content": "x", "tags": {json.dumps(["x"] * 21)}}}',
        ): "extract_memory: tags must be a list of at most 20 items or null, not 21",
        (
            "extract_memory",
            f'{{"topic": "t", "title": "t", "content": "x", "tags": ["a", "{"x" * 201}"]}}',
        ): "extract_memory: tags item 1 must be at most 200 characters, not 201",
        ("search_memory", '{"query": "deploy", "limit": true}'): (
            "search_memory: limit must be an integer, not true"
        ),
        ("search_memory", '{"query": "deploy", "reinforce": "false"}'): (
            'search_memory: reinforce must be true or false, not "false"'
        ),
        ("search_memory", '{"query": "deploy", "tier": "bogus"}'): (
            'search_memory: tier must be one of session, project, global or null, not "bogus"'
        ),
    }
    for (tool, arguments), message in refused.items():
        assert raw.call(tool, arguments) == (True, message), (tool, arguments[:80])
    recent = json.loads(raw.call("recent_memories", "{}")[1])["entries"]
    assert [e["memory"] for e in recent] == [first]  # not deleted, nothing added
    as_text = raw.call(
        "extract_memory", '{"topic": "t", "title": "t", "content": "x", "tags": "[\\"a\\"]"}'
    )
    assert not as_text[0]  # a list sent as JSON text, as some clients send lists, is a list
    for tier in ("session", "project", "global"):
        added = raw.call("add", f'{{"content": "a {tier} fact", "tier": "{tier}"}}')
        assert json.loads(added[1])["tier"] == tier


def test_a_memory_deleted_before_is_hard_deleted_by_the_tool(raw, tmp_path):
    """Issue 34, item 16: the delete tool could not remove a memory's text from the file."""
    first = json.loads(raw.call("add", '{"content": "The old root password was hunter2"}')[1])
    soft = raw.call("delete", '{"memory_id": 1}')
    again = raw.call("delete", '{"memory_id": 1}')
    hard = raw.call("delete", '{"memory_id": 1, "hard": true}')
    assert (soft[0], json.loads(soft[1])) == (False, {"deleted": 1, "hard": False})
    assert again == (True, "Error executing tool delete: memory 1 is deleted")
    assert (hard[0], json.loads(hard[1])) == (False, {"deleted": 1, "hard": True})
    with HybridIndex(str(tmp_path / "raw.db"), embedder="none") as index:
        held = index.conn.execute("select count(*) from chunks where text like '%hunter2%'").get
    assert first["id"] == 1 and held == 0


WITHOUT_MCP = (
    "import sys\n"
    "sys.modules['mcp'] = None\n"
    "from hybridsql.cli import main\n"
    "sys.exit(main(['mcp', '--db', 'mem.db']))\n"
)


def without_mcp(cwd) -> str:
    """The last line `hybridsql mcp` says where the mcp extra is not installed."""
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_MCP], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1, done.stderr
    return done.stderr.splitlines()[-1]


def test_without_the_mcp_extra_the_hint_installs_it_where_hybridsql_came_from(tmp_path):
    """Run from a checkout's source folder, the hint installs the extra there, built in place
    (PyPI's hybridsql would be another copy, or none); installed from a folder, from that
    folder; from a wheel, from PyPI."""
    checkout = tmp_path / "checkout"
    shutil.copytree(os.path.join(ROOT, "hybridsql"), checkout / "hybridsql")
    shutil.copytree(os.path.join(ROOT, "csrc"), checkout / "csrc")
    line = without_mcp(checkout)
    assert f"the MCP server needs the mcp extra: pip install -e '{checkout}[mcp]' (" in line
    package = os.path.dirname(os.path.dirname(hybridsql.__file__))
    found = importlib.metadata.distribution("hybridsql").read_text("direct_url.json")
    origin = json.loads(found) if found else {}
    if os.path.exists(os.path.join(package, "csrc", "hybridsql.c")):  # installed with -e
        wanted = f"pip install -e '{package}[mcp]'"
    elif "dir_info" in origin:
        folder = urllib.parse.unquote(urllib.parse.urlparse(origin["url"]).path)
        wanted = f"pip install '{folder}[mcp]'"
    else:
        wanted = "pip install 'hybridsql[mcp]'"
    assert f"the MCP server needs the mcp extra: {wanted} (" in without_mcp(tmp_path)
