"""The MCP server, driven by a real MCP client session over stdio: the SDK's stdio client
launches the installed ``hybridsql mcp ...`` and calls every tool, while and after the server
indexes its memory folder in the background."""

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse

import anyio
import pytest
from conftest import HYBRIDSQL, ROOT
from mcp import ClientSession, StdioServerParameters, stdio_client

import hybridsql
from hybridsql.index import HybridIndex
from hybridsql.mcp_server import TOOLS
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

    assert seen["deleted"] == {"deleted": b["id"]}
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
    "delete": "memory_id, project",
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
