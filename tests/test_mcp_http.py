"""``hybridsql mcp --http``: the installed server started as a subprocess on 127.0.0.1, driven by
the SDK's streamable HTTP client and by raw HTTP requests (httpx2, which the SDK uses)."""

import asyncio
import contextlib
import json
import multiprocessing
import os
import re
import selectors
import socket
import subprocess
import threading
import time
import urllib.parse

import anyio
import apsw
import httpx2
import pytest
from conftest import DEADLINE, HYBRIDSQL, ROOT, spawned
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from hybridsql.errors import HybridSQLError
from hybridsql.indexing.index import HybridIndex
from hybridsql.mcp.http_limits import REQUEST_SECONDS
from hybridsql.mcp.server import TOOLS
from hybridsql.memory import MemoryStore

TOKEN = "s3cret-token"
NEEDS_TOKEN = "this server needs the header Authorization: Bearer TOKEN"


@contextlib.contextmanager
def server(tmp_path, *args, env=None):
    """Runs ``hybridsql mcp --http 127.0.0.1:0 ARGS``; yields its base URL once it answers."""
    log = tmp_path / "server.log"
    with (
        open(log, "w") as err,
        spawned(
            [HYBRIDSQL, "mcp", "--http", "127.0.0.1:0", *args],
            cwd=tmp_path,
            env=dict(os.environ, **(env or {})),
            stdin=subprocess.DEVNULL,
            stderr=err,
        ) as proc,
    ):
        base = None
        answered = False
        deadline = time.monotonic() + 300  # the local model and a sanitized build start slowly
        while not answered and time.monotonic() < deadline:
            found = re.search(r"hybridsql mcp: (http://127\.0\.0\.1:\d+)/mcp", log.read_text())
            if found:
                base = found.group(1)
                with contextlib.suppress(httpx2.TransportError):
                    httpx2.get(base + "/", timeout=60)
                    answered = True
                    break
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)  # a poll interval
        assert answered, log.read_text()
        try:
            yield base
        finally:
            proc.terminate()
            assert proc.wait(timeout=DEADLINE) == 0, log.read_text()


class Client:
    """Calls tools and decodes their JSON answers (``{"error": text}`` for a tool error)."""

    def __init__(self, session):
        self.session = session

    async def call(self, tool, **arguments):
        result = await self.session.call_tool(tool, arguments)
        text = result.content[0].text
        return {"error": text} if result.is_error else json.loads(text)


@contextlib.asynccontextmanager
async def connect(url, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield Client(session)


def run(steps):
    return anyio.run(steps)


def files(folder):
    """Every file in ``folder`` with its bytes and mtime."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def leaves(error):
    """The exceptions inside ``error``'s exception groups, if any."""
    inner = getattr(error, "exceptions", None)
    return [error] if inner is None else [leaf for e in inner for leaf in leaves(e)]


def ids(found):
    return [hit["memory"]["id"] for hit in found["memories"]]


def test_projects_are_kept_apart_by_argument_and_by_url(tmp_path):
    data = tmp_path / "data"
    with server(tmp_path, "--data-dir", str(data), "--embedder", "none") as base:

        async def steps():
            seen = {}
            async with connect(base + "/mcp") as c:
                seen["tools"] = sorted(t.name for t in (await c.session.list_tools()).tools)
                seen["extract"] = await c.call("extract_memory", topic="t", title="T", content="c")
                seen["a"] = await c.call("add", content="Deploys freeze on Fridays", project="a")
                seen["b"] = await c.call("add", content="Deploys go out at noon", project="b")
                seen["in_a"] = await c.call("search_memory", query="deploys", project="a")
                seen["in_b"] = await c.call("search_memory", query="deploys", project="b")
                seen["in_c"] = await c.call("search_memory", query="deploys", project="c")
                seen["recent_c"] = await c.call("recent_memories", project="c")
                seen["none"] = await c.call("search_memory", query="deploys")
                seen["by_id"] = await c.call("reinforce", memory_id=1)
                seen["by_id_a"] = await c.call("reinforce", memory_id=seen["a"]["id"], project="a")
                seen["timeline_b"] = await c.call(
                    "timeline", memory_id=seen["b"]["id"], project="b"
                )
                seen["delete_c"] = await c.call("delete", memory_id=seen["a"]["id"], project="c")
                seen["bad"] = await c.call("add", content="x", project="../etc")
            async with connect(base + "/mcp/b") as c:
                seen["url_b"] = await c.call("search_memory", query="deploys")
                seen["url_b_arg_b"] = await c.call("recent_memories", project="b")
                seen["url_b_arg_a"] = await c.call("search_memory", query="deploys", project="a")
                seen["reinforced"] = await c.call("reinforce", memory_id=seen["b"]["id"])
                seen["timeline"] = await c.call("timeline", memory_id=seen["b"]["id"])
            async with connect(base + "/mcp/c") as c:
                seen["timeline_c"] = await c.call("timeline", memory_id=1)
            return seen

        seen = run(steps)
    assert seen["tools"] == sorted(set(TOOLS) - {"extract_memory"})  # no memory folder here
    assert seen["extract"] == {"error": "Unknown tool: extract_memory"}
    assert seen["a"]["project"] == "a" and seen["b"]["project"] == "b"
    # One index per project: ids start again at 1, and a search sees its project's rows only.
    assert seen["a"]["id"] == seen["b"]["id"] == 1
    assert [h["memory"]["content"] for h in seen["in_a"]["memories"]] == [
        "Deploys freeze on Fridays"
    ]
    assert [h["memory"]["content"] for h in seen["in_b"]["memories"]] == ["Deploys go out at noon"]
    assert seen["in_c"] == {
        "memories": [],
        "documents": [],
        "notes": ["no memory has been written to this project yet"],
    }
    assert seen["recent_c"] == {"entries": []}
    message = (
        "name a project: this server keeps one index per project; connect to /mcp/PROJECT "
        "(or give each tool project)"
    )
    # The SDK puts "Error executing tool NAME: " before every tool error.
    assert seen["none"] == {"error": f"Error executing tool search_memory: {message}"}
    assert seen["by_id"] == {"error": f"Error executing tool reinforce: {message}"}
    # Named by argument, an id tool works in that project's index, and only there (0.5 when
    # added, + 0.02 for the search that found it, + 0.1).
    assert seen["by_id_a"]["salience"] == pytest.approx(0.62)
    assert [e["memory"]["content"] for e in seen["timeline_b"]["entries"]] == [
        "Deploys go out at noon"
    ]
    assert seen["delete_c"] == {
        "error": f"Error executing tool delete: no memory with id {seen['a']['id']}"
    }
    assert seen["bad"] == {
        "error": "Error executing tool add: project names are 1 to 64 letters, digits, '.', '_' "
        "or '-', starting with a letter or digit, without '..', not '../etc'"
    }
    assert [h["memory"]["content"] for h in seen["url_b"]["memories"]] == ["Deploys go out at noon"]
    assert [e["memory"]["project"] for e in seen["url_b_arg_b"]["entries"]] == ["b"]
    assert seen["url_b_arg_a"] == {
        "error": "Error executing tool search_memory: this connection's URL is for project 'b'; "
        "it cannot use project 'a'"
    }
    assert seen["reinforced"]["project"] == "b"
    assert [e["memory"]["id"] for e in seen["timeline"]["entries"]] == [1]
    assert seen["timeline_c"] == {"error": "Error executing tool timeline: no memory with id 1"}
    assert sorted(os.listdir(data)) == ["a.db", "b.db"]  # the server stopped: WAL checkpointed
    # Each MCP session was a hybridsql session per index, ended when the client went away.
    with HybridIndex(str(data / "b.db"), embedder="none", readonly=True) as index:
        sessions = index.conn.execute(
            "select project, ended_at is not null, summary from sessions order by id"
        ).fetchall()
    assert sessions == [
        ("b", 1, "MCP session: created 1, recalled 1"),
        ("b", 1, "MCP session: recalled 1, reinforced 1"),
    ]


def test_a_token_is_required_and_nothing_is_read_without_it(tmp_path):
    data = tmp_path / "data"
    env = {"HYBRIDSQL_TOKEN": TOKEN}
    with server(tmp_path, "--data-dir", str(data), "--embedder", "none", env=env) as base:

        async def write():
            async with connect(base + "/mcp/a", TOKEN) as c:
                return await c.call("add", content="The VPN uses WireGuard")

        assert run(write)["id"] == 1
        before = files(data)
        add = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"content": "x", "project": "new"}},
        }
        accept = {"Accept": "application/json, text/event-stream"}
        for url, auth in [
            ("/mcp", None),
            ("/mcp/a", "Bearer wrong"),
            ("/mcp/new", f"Bearer {TOKEN}x"),
            ("/mcp/new", TOKEN),
        ]:
            headers = dict(accept, **({"Authorization": auth} if auth else {}))
            r = httpx2.post(base + url, json=add, headers=headers)
            assert (r.status_code, r.json()) == (401, {"error": NEEDS_TOKEN})
            assert r.headers["www-authenticate"] == 'Bearer realm="hybridsql"'
        assert files(data) == before

        async def without_token():
            async with connect(base + "/mcp/a") as c:
                return await c.call("recent_memories")

        with pytest.raises(Exception) as refused:
            run(without_token)
        # The SDK client's word for a 401, inside anyio's exception groups.
        assert [repr(e) for e in leaves(refused.value)] == [
            "MCPError(-32603, 'Server returned an error response', None)"
        ]
        assert files(data) == before

        async def read():
            async with connect(base + "/mcp/a", TOKEN) as c:
                return await c.call("recent_memories")

        assert [e["memory"]["content"] for e in run(read)["entries"]] == ["The VPN uses WireGuard"]


def start_refused(tmp_path, *args):
    """``hybridsql mcp --embedder none ARGS`` in ``tmp_path``, without the environment's token
    or database, run to its end: a server that refuses to start."""
    env = {k: v for k, v in os.environ.items() if k not in ("HYBRIDSQL_TOKEN", "HYBRIDSQL_DB")}
    return subprocess.run(
        [HYBRIDSQL, "mcp", "--embedder", "none", *args],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--http", "0.0.0.0:0", "--data-dir", "data"],
            "0.0.0.0 is not a loopback address: set a token in HYBRIDSQL_TOKEN (or --token), or "
            "keys with --keys FILE, so that only clients that send one are served",
        ),
        (
            ["--http", "127.0.0.1:0", "--data-dir", "data", "--db", "x.db"],
            "give either --db FILE (one index) or --data-dir DIR (one per project)",
        ),
        (
            ["--http", "127.0.0.1", "--data-dir", "data"],
            "--http expects HOST:PORT, such as 127.0.0.1:8765, not '127.0.0.1'",
        ),
        (
            ["--data-dir", "data"],
            "--data-dir, --token and --keys serve over HTTP: add --http HOST:PORT",
        ),
        (
            ["--http", "127.0.0.1:0", "--data-dir", "data", "--memory-dir", "."],
            "--memory-dir needs --db: with --data-dir each project has an index",
        ),
        (
            ["--http", "127.0.0.1:0", "--data-dir", "data", "--project", "a/b"],
            "project names are 1 to 64 letters, digits, '.', '_' or '-', starting with a letter "
            "or digit, without '..', not 'a/b'",
        ),
    ],
    ids=["non-loopback", "both", "no-port", "no-http", "memory-dir", "bad-project"],
)
def test_the_server_refuses_to_start_with_one_line(tmp_path, args, message):
    done = start_refused(tmp_path, *args)
    assert (done.returncode, done.stderr) == (1, f"hybridsql: {message}\n")
    assert os.listdir(tmp_path) == []


def test_bad_requests_get_clear_errors_and_the_server_stays_up(tmp_path):
    data = tmp_path / "data"
    with server(tmp_path, "--data-dir", str(data), "--embedder", "none") as base:
        accept = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        r = httpx2.post(
            base + "/mcp/a", content=b'{"jsonrpc": "2.0", "id": 1, "meth', headers=accept
        )
        assert r.status_code == 400
        assert r.json()["error"]["code"] == -32700  # JSON-RPC's parse error
        r = httpx2.post(base + "/mcp/a", content=b"x" * (5 * 1024 * 1024), headers=accept)
        assert (r.status_code, r.text) == (413, "Request body too large")
        for name, shown in [(".hidden", ".hidden"), ("a%2Fb", "a/b"), ("a..b", "a..b"), ("", "")]:
            r = httpx2.post(base + "/mcp/" + name, json={}, headers=accept)
            assert (r.status_code, r.json()) == (
                400,
                {
                    "error": "project names are 1 to 64 letters, digits, '.', '_' or '-', "
                    f"starting with a letter or digit, without '..', not {shown!r}"
                },
            )

        junk = b"not a database " * 300
        (data / "junk.db").write_bytes(junk)

        async def steps():
            async with connect(base + "/mcp/junk") as c:
                damaged = await c.call("search_memory", query="x")
            async with connect(base + "/mcp/a") as c:
                unknown = await c.call("forget_everything", memory_id=1)
                added = await c.call("add", content="Still answering after bad requests")
                return damaged, unknown, added

        damaged, unknown, added = run(steps)
        assert damaged == {
            "error": f"Error executing tool search_memory: {data / 'junk.db'} is not a SQLite "
            "database (or its header is damaged); check the path, or restore the file from a backup"
        }
        assert unknown == {"error": "Unknown tool: forget_everything"}
        assert added["content"] == "Still answering after bad requests"
    assert sorted(os.listdir(data)) == ["a.db", "junk.db"]
    assert (data / "junk.db").read_bytes() == junk


def test_a_tool_call_is_answered_as_one_json_body(tmp_path):
    """A tool's answer comes as one JSON body, not an SSE stream (issue 42): the stream cost
    the server a task, a channel and event framing per request, and the tools send nothing
    before their result. A client that takes both (as the SDK's does) reads either."""
    headers = {"Accept": "application/json, text/event-stream"}
    with server(tmp_path, "--data-dir", str(tmp_path / "data"), "--embedder", "none") as base:
        r = httpx2.post(base + "/mcp/a", json=INITIALIZE, headers=headers, timeout=60)
        assert r.headers["content-type"].startswith("application/json"), r.text
        headers["mcp-session-id"] = r.headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert httpx2.post(base + "/mcp/a", json=initialized, headers=headers).status_code == 202
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"content": "answered in one body"}},
        }
        r = httpx2.post(base + "/mcp/a", json=call, headers=headers, timeout=60)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json"), r.text
    answer = r.json()
    assert answer["id"] == 2 and not answer["result"]["isError"]
    assert json.loads(answer["result"]["content"][0]["text"])["content"] == "answered in one body"


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_connections_the_server_accepts_send_at_once(host):
    """Nagle's algorithm is off on every connection the server's socket accepts, as uvicorn
    serves it (asyncio's create_server on that socket). With it on, a kept-alive connection's
    answers after the first waited for the client's delayed ACK of their headers before the
    body went out: 40 ms on Linux, 48 of a one-client hybrid search's 60 (issue 42). asyncio
    turns it off only for a socket whose protocol says TCP, which ours did not."""
    from hybridsql.mcp.http import listening_socket

    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        sock = listening_socket(host, 0)
    except HybridSQLError as e:  # an IPv6 stack without ::1 (some containers)
        if host == "::1":
            pytest.skip(str(e))
        raise
    nodelay = []

    class Recorder(asyncio.Protocol):
        def connection_made(self, transport):
            accepted = transport.get_extra_info("socket")
            nodelay.append(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def main():
        loop = asyncio.get_running_loop()
        listening = await loop.create_server(Recorder, sock=sock)
        async with listening:
            port = sock.getsockname()[1]
            for _ in range(2):
                _, writer = await asyncio.open_connection(host, port)
                writer.close()
            while len(nodelay) < 2:
                await asyncio.sleep(0.01)

    asyncio.run(asyncio.wait_for(main(), DEADLINE))
    assert nodelay == [1, 1]


def test_concurrent_clients_lose_no_write(tmp_path):
    """8 clients add and search in parallel across two projects while another process (the
    ``hybridsql memory add`` command) writes to one of the files; every add acknowledged must be
    found afterwards, and no client may see an error ("database is locked" included)."""
    seconds = float(os.environ.get("HYBRIDSQL_HTTP_SECONDS", "3"))
    data = tmp_path / "data"
    with server(tmp_path, "--data-dir", str(data), "--embedder", "none") as base:
        acked, errors = [], []

        async def worker(n, stop_at):
            project = f"p{n % 2}"
            async with connect(f"{base}/mcp/{project}") as c:
                i = 0
                while anyio.current_time() < stop_at:
                    word = f"w{n}x{i}"
                    added = await c.call("add", content=f"note {word} from client {n}")
                    if "error" in added:
                        errors.append(added)
                    else:
                        acked.append((project, added["id"], word))
                    found = await c.call("search_memory", query=f"note w{n}", limit=5, documents=0)
                    if "error" in found:
                        errors.append(found)
                    i += 1

        async def other_process(stop_at):
            n = 0
            while anyio.current_time() < stop_at or n == 0:
                word = f"cli{n}"
                argv = [HYBRIDSQL, "memory", "add", f"note {word} from the command"]
                argv += ["--project", "p0", "--db", str(data / "p0.db"), "--embedder", "none"]
                done = await anyio.run_process(argv, cwd=tmp_path, check=False)
                if done.returncode != 0:
                    errors.append(done.stderr.decode())
                else:
                    acked.append(("p0", json.loads(done.stdout)["id"], word))
                n += 1

        async def steps():
            stop_at = anyio.current_time() + seconds
            async with anyio.create_task_group() as tasks:
                for n in range(8):
                    tasks.start_soon(worker, n, stop_at)
                tasks.start_soon(other_process, stop_at)

        run(steps)
    assert errors == []
    assert len(acked) >= 8
    for project in ("p0", "p1"):
        mine = {(i, word) for p, i, word in acked if p == project}
        with HybridIndex(str(data / f"{project}.db"), embedder="none", readonly=True) as index:
            store = MemoryStore(index)
            lost = [
                (i, word)
                for i, word in mine
                if i not in ids_of(store.search(word, mode="keyword", reinforce=False))
            ]
            assert lost == []
            rows = index.conn.execute("select count(*) from memories").fetchone()[0]
            assert rows == len(mine)


def test_a_search_memory_waits_for_its_index_once(tmp_path):
    """The memories' search and the documents' run in one call under the index's guard: a
    request queues behind the others once, not twice (which doubled a loaded server's p95),
    and no other call runs between its two halves. Its answer is the two searches'."""
    from hybridsql.mcp.server import Place, build_server, search_both

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "deploys.md").write_text("# Deploys\n\nDeploys are frozen on Fridays.\n")
    with HybridIndex(str(tmp_path / "m.db"), embedder="none") as index:
        index.index_folder(str(folder))
        store = MemoryStore(index)
        store.add("deploy freezes start at noon", project="p")
        guard, calls = threading.Lock(), []

        def call(fn, *args, **kwargs):
            # not reentrant, so a call made while another holds it fails here: calls do not nest
            assert guard.acquire(blocking=False)
            try:
                calls.append(fn)
                return fn(store, *args, **kwargs)
            finally:
                guard.release()

        place = Place(call, lambda: None, "p", "p")
        server = build_server(lambda project, write=False: place)
        result = asyncio.run(
            server.call_tool(
                "search_memory", {"query": "deploy", "documents": 3, "reinforce": False}
            )
        )
        answer = json.loads(result.content[0].text)
        memories = store.search("deploy", project="p", reinforce=False)
        documents = store.search_documents("deploy", "p", 3)
    assert calls == [search_both]
    assert [m["memory"]["id"] for m in answer["memories"]] == [h.memory.id for h in memories] != []
    assert [(d["path"], d["start_line"]) for d in answer["documents"]] == [
        (d.path, d.start_line) for d in documents
    ]


def test_concurrent_hybrid_searches_find_what_a_quiet_one_finds_and_lose_no_add(tmp_path):
    """With the local model, 6 clients add to one project and run hybrid searches of another
    in parallel, each with queries of its own: a search embeds its query before it takes the
    index's lock (issue 42), on its thread's own connection, so a search given another's
    vector would rank differently. Every search answers as the same search alone, and every
    acknowledged add is found, by meaning and by its word, once each."""
    seconds = float(os.environ.get("HYBRIDSQL_HTTP_SECONDS", "3"))
    data = tmp_path / "data"
    facts = [
        "Maya indents Python with four spaces",
        "the billing service retries a failed charge three times",
        "deploys to production happen on Tuesday mornings",
        "the cache folder is cleared before each release build",
        "Tomas prefers dark themes in every editor",
        "the staging database is restored from last night's backup",
    ]
    queries = [
        "how wide is an indent",
        "what happens when a payment fails",
        "which day do we ship",
        "what is removed before releasing",
        "which colours does Tomas like",
        "where does staging get its data",
    ]
    with server(tmp_path, "--data-dir", str(data), "--embedder", "local") as base:

        async def prepare():
            async with connect(f"{base}/mcp/quiet") as c:
                for fact in facts:
                    await c.call("add", content=fact)

        run(prepare)
        acked, errors, answers = [], [], []

        async def worker(n, stop_at):
            async with connect(f"{base}/mcp") as c:
                i = 0
                while anyio.current_time() < stop_at or i == 0:
                    word = f"w{n}x{i}"
                    added = await c.call("add", content=f"{facts[n]} ({word})", project="busy")
                    if "error" in added:
                        errors.append(added)
                    else:
                        acked.append((added["id"], word))
                    q = queries[(n + i) % len(queries)]
                    found = await c.call(
                        "search_memory",
                        query=q,
                        limit=6,
                        documents=0,
                        reinforce=False,
                        project="quiet",
                    )
                    answers.append((q, found))
                    i += 1

        async def steps():
            stop_at = anyio.current_time() + seconds
            async with anyio.create_task_group() as tasks:
                for n in range(len(facts)):
                    tasks.start_soon(worker, n, stop_at)

        run(steps)
    assert errors == []
    with HybridIndex(str(data / "quiet.db"), embedder="local", readonly=True) as index:
        store = MemoryStore(index)  # each search alone, in this process
        expected = {
            q: [
                (h.memory.id, h.score)
                for h in store.search(q, project="quiet", limit=6, reinforce=False)
            ]
            for q in queries
        }
    # The queries rank differently: a search given another's vector would show.
    assert len({tuple(expected[q]) for q in queries}) == len(queries)
    for q, found in answers:
        assert ids(found) == [i for i, _ in expected[q]], q
        assert [h["score"] for h in found["memories"]] == pytest.approx(
            [score for _, score in expected[q]], rel=1e-4
        )  # their recency moves on a little between the two
    with HybridIndex(str(data / "busy.db"), embedder="local", readonly=True) as index:
        store = MemoryStore(index)
        lost = [
            (i, word)
            for i, word in acked
            if i not in ids_of(store.search(word, mode="keyword", reinforce=False))
        ]
        assert lost == []
        rows = index.conn.execute("select count(*) from memories").fetchone()[0]
        assert rows == len(acked) == len({i for i, _ in acked})


def ids_of(found):
    return [hit.memory.id for hit in found]


def test_one_database_with_the_local_model(tmp_path, memory_dir):
    db = str(tmp_path / "mem.db")
    args = ["--db", db, "--memory-dir", str(memory_dir), "--project", "tide", "--embedder", "local"]
    with server(tmp_path, *args) as base:

        async def steps():
            async with connect(base + "/mcp") as c:
                added = await c.call("add", content="Maya indents Python with four spaces")
                with anyio.fail_after(300):  # until the background indexing is done
                    while True:
                        found = await c.call("search_memory", query="indentation", reinforce=False)
                        if not any(n.startswith("indexing: ") for n in found["notes"]):
                            break
                        await anyio.sleep(0.05)  # a poll interval
            async with connect(base + "/mcp/billing") as c:
                billing = await c.call("recent_memories")
            return added, found, billing

        added, found, billing = run(steps)
    assert added["project"] == "tide"
    assert ids(found)[0] == added["id"]  # by meaning: no word in common
    assert found["documents"]
    assert billing == {"entries": []}
    conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    assert conn.execute("select count(*) from sessions where ended_at is null").fetchone() == (0,)


def test_the_cache_closes_the_least_recently_used_index_and_reopens_it(tmp_path):
    """In process, without HTTP: 5 projects through a cache of 2 open indexes."""
    from hybridsql.mcp.http import Projects

    projects = Projects(None, str(tmp_path), "none", cache=2)
    try:
        for turn in range(2):
            for n in range(5):
                place = projects.where(f"p{n}", write=True)
                place.call(MemoryStore.add, f"fact {turn} of project {n}", place.owner)
                assert len(projects.open_indexes) <= 2
        found = {}
        for n in range(5):
            place = projects.where(f"p{n}")
            hits = place.call(MemoryStore.search, "fact", project=place.project, reinforce=False)
            found[n] = sorted(hit.memory.content for hit in hits)
            assert place.session() == 1  # the session this MCP session started in p{n}
        projects.end_sessions(idle_for=3600)  # the server's sweep: none idle that long
        assert len(projects.sessions) == 5
        projects.end_sessions(idle_for=0)
        assert projects.sessions == {}
    finally:
        projects.close()
    assert found == {n: [f"fact 0 of project {n}", f"fact 1 of project {n}"] for n in range(5)}
    assert sorted(os.listdir(tmp_path)) == [f"p{n}.db" for n in range(5)]
    for n in range(5):
        with HybridIndex(str(tmp_path / f"p{n}.db"), embedder="none", readonly=True) as index:
            ended = index.conn.execute("select summary from sessions").fetchall()
        assert ended == [("MCP session: no memories used",)]


def test_the_readme_http_client_configuration_reaches_the_server(tmp_path):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"^```json\n(.*?)^```$", f.read(), re.MULTILINE | re.DOTALL)
    (configuration,) = [json.loads(b) for b in blocks if '"type": "http"' in b]
    entry = configuration["servers"]["hybridsql"]
    (token_input,) = configuration["inputs"]
    url = urllib.parse.urlsplit(entry["url"])
    prompt = "${input:" + token_input["id"] + "}"  # VS Code asks for the token there
    headers = {k: v.replace(prompt, TOKEN) for k, v in entry["headers"].items()}
    data = tmp_path / "data"
    env = {"HYBRIDSQL_TOKEN": TOKEN}
    with server(tmp_path, "--data-dir", str(data), "--embedder", "none", env=env) as base:

        async def steps():
            async with (
                httpx2.AsyncClient(headers=headers, timeout=120) as http,
                streamable_http_client(base + url.path, http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                added = await session.call_tool("add", {"content": "The README's client works"})
                return json.loads(added.content[0].text)

        added = run(steps)
    assert (url.path, added["project"]) == ("/mcp/tide", "tide")
    assert sorted(os.listdir(data)) == ["tide.db"]


def test_another_applications_file_in_the_data_folder_is_left_as_it_was(tmp_path):
    """A project whose file is another application's database: every call that would open it
    is refused in one line, and the file keeps its bytes and its journal mode (no -wal)."""
    data = tmp_path / "data"
    data.mkdir()
    shop = data / "shop.db"
    conn = apsw.Connection(str(shop))
    conn.execute("create table users(id integer primary key, name text)")
    conn.execute("insert into users values (1, 'Ada')")
    conn.close()
    before = files(data)
    with server(tmp_path, "--data-dir", str(data), "--embedder", "none") as base:

        async def steps():
            async with connect(base + "/mcp/shop") as c:
                added = await c.call("add", content="a memory")
                return added, await c.call("search_memory", query="x")

        added, searched = run(steps)
    refused = f"{shop} is not a hybridsql index; use another file"
    assert added == {"error": f"Error executing tool add: {refused}"}
    assert searched == {"error": f"Error executing tool search_memory: {refused}"}
    assert files(data) == before


# -- keys per project ------------------------------------------------------------------------

KEY_ALPHA = "alpha-writer-0123456789"
KEY_BETA = "beta-writer-0123456789ab"
KEY_READ = "alpha-reader-0123456789"
KEY_ALL = "admin-key-every-project-01"
KEYS = f"""# key scope projects
{KEY_ALPHA}  write  alpha
{KEY_BETA}   write  beta
{KEY_READ}   read   alpha
{KEY_ALL}    write  *
"""
TOOL = "Error executing tool "  # what the SDK puts before a tool's error
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


def post(base, url, key, body=INITIALIZE, session=None):
    headers = dict(ACCEPT, Authorization=f"Bearer {key}")
    if session:
        headers["mcp-session-id"] = session
    return httpx2.post(base + url, json=body, headers=headers, timeout=60)


def test_each_key_reaches_its_own_projects_and_no_other(tmp_path):
    data, keys = tmp_path / "data", tmp_path / "keys"
    keys.write_text(KEYS)
    with server(
        tmp_path, "--data-dir", str(data), "--embedder", "none", "--keys", str(keys)
    ) as base:

        async def as_owners():
            seen = {}
            async with connect(base + "/mcp/alpha", KEY_ALPHA) as c:
                seen["alpha"] = await c.call("add", content="Alpha deploys on Mondays")
            async with connect(base + "/mcp/beta", KEY_BETA) as c:
                seen["beta"] = await c.call("add", content="Beta deploys on Fridays")
            async with connect(base + "/mcp", KEY_ALPHA) as c:  # by argument, not URL
                seen["cross_add"] = await c.call("add", content="x", project="beta")
                seen["cross_read"] = await c.call("recent_memories", project="beta")
                seen["missing"] = await c.call("recent_memories", project="gamma")
                seen["unnamed"] = await c.call("recent_memories")
            return seen

        seen = run(as_owners)
        assert seen["alpha"]["id"] == seen["beta"]["id"] == 1
        # The same answer whether the project exists (beta) or not (gamma): nothing is said.
        assert seen["cross_add"] == {"error": f"{TOOL}add: this key does not cover project 'beta'"}
        assert seen["cross_read"] == {
            "error": f"{TOOL}recent_memories: this key does not cover project 'beta'"
        }
        assert seen["missing"] == {
            "error": f"{TOOL}recent_memories: this key does not cover project 'gamma'"
        }
        assert seen["unnamed"] == {
            "error": f"{TOOL}recent_memories: name a project: this key covers alpha"
        }
        before = files(data)
        for url in ("/mcp/beta", "/mcp/gamma"):
            r = post(base, url, KEY_ALPHA)
            assert (r.status_code, r.json()) == (
                403,
                {"error": f"this key does not cover project {url[5:]!r}"},
            )
        r = post(base, "/mcp/alpha", "not-a-key-of-this-file")
        assert (r.status_code, r.json()) == (401, {"error": NEEDS_TOKEN})
        assert files(data) == before

        async def as_reader():
            seen = {}
            async with connect(base + "/mcp/alpha", KEY_READ) as c:
                seen["search"] = await c.call("search_memory", query="deploys")
                seen["recent"] = await c.call("recent_memories")
                seen["add"] = await c.call("add", content="y")
                seen["reinforce"] = await c.call("reinforce", memory_id=1)
                seen["delete"] = await c.call("delete", memory_id=1)
            return seen

        seen = run(as_reader)
        assert [h["memory"]["content"] for h in seen["search"]["memories"]] == [
            "Alpha deploys on Mondays"
        ]
        assert [e["memory"]["content"] for e in seen["recent"]["entries"]] == [
            "Alpha deploys on Mondays"
        ]
        assert seen["add"] == {
            "error": f"{TOOL}add: this key can only read: it cannot change project 'alpha'"
        }
        for tool in ("reinforce", "delete"):
            assert seen[tool] == {
                "error": f"{TOOL}{tool}: this key can only read project 'alpha': it cannot change it"
            }
        # a read key's search reinforced nothing and started no session: the file is as it was
        assert files(data) == before
        log = (tmp_path / "server.log").read_text()
        assert not any(key in log for key in (KEY_ALPHA, KEY_BETA, KEY_READ, KEY_ALL))


def test_an_mcp_session_is_bound_to_the_project_and_key_that_opened_it(tmp_path):
    data, keys = tmp_path / "data", tmp_path / "keys"
    keys.write_text(KEYS)
    with server(
        tmp_path, "--data-dir", str(data), "--embedder", "none", "--keys", str(keys)
    ) as base:
        opened = post(base, "/mcp/alpha", KEY_ALL)
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        refused = {
            "error": "this MCP session was opened for another project or key: open a new one"
        }
        for url, key in [("/mcp/beta", KEY_ALL), ("/mcp", KEY_ALL), ("/mcp/alpha", KEY_ALPHA)]:
            r = post(base, url, key, session=session)
            assert (r.status_code, r.json()) == (403, refused), (url, key)
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert post(base, "/mcp/alpha", KEY_ALL, initialized, session).status_code == 202


def test_the_key_file_is_read_again_when_it_changes(tmp_path):
    data, keys = tmp_path / "data", tmp_path / "keys"
    keys.write_text(KEYS)
    with server(
        tmp_path, "--data-dir", str(data), "--embedder", "none", "--keys", str(keys)
    ) as base:
        new_key = "gamma-writer-0123456789"
        assert post(base, "/mcp/gamma", new_key).status_code == 401
        keys.write_text(KEYS + f"{new_key} write gamma\n")
        assert post(base, "/mcp/gamma", new_key).status_code == 200
        keys.write_text("broken line\n")  # kept: the keys read before still answer
        assert post(base, "/mcp/gamma", new_key).status_code == 200
        assert post(base, "/mcp/alpha", KEY_ALPHA).status_code == 200
        log = (tmp_path / "server.log").read_text()
        said = f"hybridsql mcp: {keys} line 1: expected KEY SCOPE PROJECT..., found 2 words;"
        assert log.count(said) == 1 and "keeping the keys read before" in log
        assert new_key not in log


@pytest.mark.parametrize(
    "text, message",
    [
        ("short write alpha\n", "{keys} line 1: a key is 16 to 256 printable characters, not 5"),
        (f"{KEY_ALPHA} admin alpha\n", "{keys} line 1: the scope is read or write, not 'admin'"),
        (
            f"# c\n{KEY_ALPHA} write a/b\n",
            "{keys} line 2: project names are 1 to 64 letters, "
            "digits, '.', '_' or '-', starting with a letter or digit, without '..', not 'a/b'",
        ),
        (f"{KEY_ALPHA} write * alpha\n", "{keys} line 1: '*' (every project) stands alone"),
        (
            f"{KEY_ALPHA} write a\n{KEY_ALPHA} read b\n",
            "{keys} line 2: this key is also on an earlier line",
        ),
        ("# nothing\n", "{keys} holds no key: add a line KEY SCOPE PROJECT..."),
    ],
    ids=["short", "scope", "project", "star", "twice", "empty"],
)
def test_a_bad_key_file_stops_the_server_with_one_line(tmp_path, text, message):
    keys = tmp_path / "keys"
    keys.write_text(text)
    done = start_refused(
        tmp_path, "--http", "127.0.0.1:0", "--data-dir", "data", "--keys", str(keys)
    )
    assert (done.returncode, done.stderr) == (1, f"hybridsql: {message.format(keys=keys)}\n")
    assert KEY_ALPHA not in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["keys"]


def test_a_removed_project_file_is_noticed_and_no_write_goes_into_it(tmp_path):
    data = tmp_path / "data"
    with server(tmp_path, "--data-dir", str(data), "--embedder", "none") as base:

        async def first():
            async with connect(base + "/mcp/p") as c:
                return await c.call("add", content="Written before the file was removed")

        assert run(first)["id"] == 1
        for name in ("p.db", "p.db-wal", "p.db-shm"):
            with contextlib.suppress(FileNotFoundError):
                (data / name).unlink()

        async def after():
            seen = {}
            async with connect(base + "/mcp/p") as c:
                seen["recent"] = await c.call("recent_memories")  # reads make no file
                seen["exists"] = (data / "p.db").exists()
                seen["add"] = await c.call("add", content="Written after the file was removed")
                seen["search"] = await c.call("search_memory", query="written")
            return seen

        seen = run(after)
        assert seen["recent"] == {"entries": []} and not seen["exists"]
        assert seen["add"]["id"] == 1  # a new index, in a new file
        assert [h["memory"]["content"] for h in seen["search"]["memories"]] == [
            "Written after the file was removed"
        ]
    # What the client was told is in the file on disk, read by another process.
    conn = apsw.Connection(str(data / "p.db"))
    assert conn.execute("select text from chunks join memories on chunk_id = id").fetchall() == [
        ("Written after the file was removed",)
    ]
    assert "p.db was removed or replaced: opened again" in (tmp_path / "server.log").read_text()


def keyed_times(base, headers, count) -> list:
    """The seconds of ``count`` requests of a client with the token, one after another, sorted;
    each must be answered."""
    times = []
    with httpx2.Client(timeout=30) as client:
        for _ in range(count):
            t = time.monotonic()
            r = client.post(base + "/mcp/a", json=INITIALIZE, headers=headers)
            times.append(time.monotonic() - t)
            assert r.status_code == 200
    return sorted(times)


def test_slow_clients_cannot_hold_the_server(tmp_path):
    """1,000 connections that send half a request and wait, from 21 addresses, while a client
    with the token keeps its p95 under 1 s; the slow ones are closed within the deadline and
    the log says so in a few lines, not one per connection."""
    data = tmp_path / "data"
    env = {"HYBRIDSQL_TOKEN": TOKEN}
    with server(tmp_path, "--data-dir", str(data), "--embedder", "none", env=env) as base:
        port = int(base.rsplit(":", 1)[1])
        headers = dict(ACCEPT, Authorization=f"Bearer {TOKEN}")
        alone = keyed_times(base, headers, 20)  # what they take on this machine now
        slow = []
        try:
            # 20 addresses under the per-client bound (40 each), one far over it (200)
            plan = [f"127.0.0.{2 + i}" for i in range(20) for _ in range(40)]
            plan += ["127.0.1.1"] * 200
            for source in plan:
                s = socket.socket()
                s.bind((source, 0))
                s.connect(("127.0.0.1", port))
                s.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
                slow.append(s)
            started = time.monotonic()
            times = keyed_times(base, headers, 40)
            # The bound is a p95 of 1 s. A client the slow connections held would wait
            # for their deadline (REQUEST_SECONDS, 10 s): the p95 must stay well under half
            # that, and within 4 times what the same requests took before them (a load on the
            # machine slows both alike).
            bound = min(REQUEST_SECONDS / 2, max(1.0, 4 * alone[-1]))
            assert times[int(len(times) * 0.95) - 1] < bound, (times, alone)
            # The server closes every slow connection by its deadline (10 s from connecting).
            closed = 0
            for s in slow:
                s.settimeout(max(0.1, started + 20 - time.monotonic()))
                with contextlib.suppress(ConnectionResetError):
                    if s.recv(1) == b"":
                        closed += 1
                        continue
                closed += 1  # reset: closed too
            assert closed == len(slow)
        finally:
            for s in slow:
                s.close()
    log = (tmp_path / "server.log").read_text().splitlines()
    refused = [line for line in log if "64 connections without a key already open" in line]
    assert refused == [
        "hybridsql mcp: 127.0.1.1: closed: 64 connections without a key already open"
    ]
    slowed = [line for line in log if "no whole request within 10 s" in line]
    ours = [line for line in log if line.startswith("hybridsql mcp: ")]
    assert 1 <= len(slowed) <= 21 and len(ours) < 30


def test_arguments_the_schema_does_not_allow_are_refused_over_http_too(tmp_path):
    """Issue 34, items 14 and 16, over HTTP: delete {"memory_id": true} deleted memory 1, and a
    memory deleted before could not be removed with its text."""
    data = tmp_path / "data"
    with server(tmp_path, "--data-dir", str(data), "--embedder", "none") as base:

        async def steps():
            async with connect(base + "/mcp/a") as c:
                first = await c.call("add", content="The staging password is hunter2")
                seen = {
                    "true": await c.call("delete", memory_id=True),
                    "text": await c.call("delete", memory_id="1"),
                    "float": await c.call("delete", memory_id=1.0),
                    "tier": await c.call("add", content="x", tier="bogus"),
                    "project": await c.call("recent_memories", project="p" * 201),
                    "kept": await c.call("recent_memories"),
                }
                seen["soft"] = await c.call("delete", memory_id=first["id"])
                seen["hard"] = await c.call("delete", memory_id=first["id"], hard=True)
                return first, seen

        first, seen = run(steps)
    assert first["id"] == 1
    assert seen["true"] == {"error": "delete: memory_id must be an integer, not true"}
    assert seen["text"] == {"error": 'delete: memory_id must be an integer, not "1"'}
    assert seen["float"] == {"error": "delete: memory_id must be an integer, not 1.0"}
    assert seen["tier"] == {
        "error": 'add: tier must be one of session, project, global, not "bogus"'
    }
    assert seen["project"] == {
        "error": "recent_memories: project must be at most 200 characters or null, not 201"
    }
    assert [e["memory"]["id"] for e in seen["kept"]["entries"]] == [1]
    assert (seen["soft"], seen["hard"]) == (
        {"deleted": 1, "hard": False},
        {"deleted": 1, "hard": True},
    )
    with HybridIndex(str(data / "a.db"), embedder="none") as index:
        assert (
            index.conn.execute("select count(*) from chunks where text like '%hunter2%'").get == 0
        )


HALF_REQUEST = b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"


def reopening(port: int, count: int, stop, opened) -> None:
    """``count`` connections to ``port`` from 127.0.0.1, each sending half a request and waiting;
    each one the server closes is opened again at once, until ``stop`` is set. Runs in a process
    of its own, so that the keyed client's times are the server's, not this loop's."""

    def open_one() -> None:
        s = socket.socket()
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        selector.register(s, selectors.EVENT_WRITE)
        opened.value += 1

    with selectors.DefaultSelector() as selector:
        for _ in range(count):
            open_one()
        while not stop.is_set():
            for key, events in selector.select(timeout=0.1):
                s = key.fileobj
                connected = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                if events & selectors.EVENT_WRITE and connected:
                    with contextlib.suppress(OSError):
                        s.send(HALF_REQUEST)
                    selector.modify(s, selectors.EVENT_READ)
                    continue
                selector.unregister(s)  # closed by the server (or refused): again
                s.close()
                open_one()
        for key in list(selector.get_map().values()):
            key.fileobj.close()


def test_clients_without_a_key_cannot_lock_out_a_keyed_one_on_their_address(tmp_path):
    """200 half-sent connections from 127.0.0.1, each opened again as the server closes it: a
    client with the key on the same address gets its answers (it got 3 of 50 while the
    per-address bound counted connections before their key was read)."""
    env = {"HYBRIDSQL_TOKEN": TOKEN}
    with server(
        tmp_path, "--data-dir", str(tmp_path / "data"), "--embedder", "none", env=env
    ) as base:
        headers = dict(ACCEPT, Authorization=f"Bearer {TOKEN}")
        alone = keyed_times(base, headers, 20)  # before the flood: what they take here now
        processes = multiprocessing.get_context("fork")
        stop, opened = processes.Event(), processes.Value("l", 0)
        port = int(base.rsplit(":", 1)[1])
        flood = processes.Process(target=reopening, args=(port, 200, stop, opened), daemon=True)
        flood.start()
        times, answered = [], 0
        try:
            time.sleep(1)  # the flood at its height: the server closes and it reopens
            for _ in range(50):
                t = time.monotonic()
                with contextlib.suppress(httpx2.TransportError):
                    r = httpx2.post(base + "/mcp/a", json=INITIALIZE, headers=headers, timeout=10)
                    answered += r.status_code == 200
                times.append(time.monotonic() - t)
        finally:
            stop.set()
            flood.join()
        times.sort()
        p95 = times[int(len(times) * 0.95) - 1]
        print(f"answered {answered} of 50, p95 {p95:.3f} s, {opened.value} connections opened")
        assert answered >= 49 and opened.value > 200
        # The bound is 1 s (0.34 to 0.71 s measured alone on a shared 2-core machine).
        # A client locked out waits for a slot, which the flood's half-sent connections free at
        # their deadline (REQUEST_SECONDS, 10 s): the p95 must stay well under half that, and
        # within 4 times what the same requests took before the flood (the server's own work
        # on the flood slows them; a load on the machine slows both alike).
        bound = min(REQUEST_SECONDS / 2, max(2.0, 4 * alone[-1]))
        assert p95 < bound, (times, alone)
