"""The memory store as an MCP server over HTTP: ``hybridsql mcp --http HOST:PORT``.

The same tools as over stdio, on the SDK's streamable HTTP transport (stateful: each client
gets an MCP session id), served by uvicorn to many clients at once.

- ``--db FILE``: one index, as over stdio. ``--data-dir DIR``: one index per project,
  ``DIR/PROJECT.db``, made by the first write to that project (no memory folder, so no
  extract_memory); a read of a project that has
  none answers empty and makes nothing. The project is the URL's (``/mcp/PROJECT``) or, at
  ``/mcp``, the tools' ``project`` argument (else ``--project``). A tool argument that names
  another project than the URL is refused, never read.
- Access: with a token (``HYBRIDSQL_TOKEN`` or ``--token``) every request must carry
  ``Authorization: Bearer TOKEN`` or is answered 401 before anything is read. With ``--keys
  FILE`` (hybridsql/mcp/keys.py) each key reaches the projects its line names, to read or to write;
  a project it does not cover is answered 403 (tool calls: an error), whether or not it exists.
  An MCP session is bound to the project and key that opened it. A non-loopback address needs a
  token or keys.
- A hybridsql session is one MCP session's work in one index: started by its first call that
  links memories (add, supersede, reinforce, a search that reinforces), ended with a count of
  what it used when the client ends the MCP session (DELETE), after the SDK's idle timeout, or
  when the server stops.
- Each open index has one connection whose calls run one at a time (the Guard): SQLite has one
  writer per file anyway, and other processes writing the file wait on the busy timeout that
  ``connect()`` sets. Indexes of different projects are used in parallel. At most
  ``CACHE_SIZE`` stay open (least recently used closed first), so thousands of projects do not
  exhaust file descriptors; the embedder (the local model) is loaded once for all of them.
  A search's query is embedded before its call takes the guard, on a connection of the worker
  thread's own (``Projects.embed_ahead``), and the vectors of the last SHARED_QUERIES queries
  are kept for every index: the guard is held for the search's statements alone, once for its
  memories and documents together (``search_both``). More connections for reads were measured
  slower: every search writes its recalls, and each commit makes SQLite drop the other
  connections' page caches (docs/benchmarks.md, "One wait for the index").
- Answers are one JSON body each (the SDK's ``json_response``), not an SSE stream: the tools
  send nothing before their result.
"""

import contextlib
import ipaddress
import json
import os
import re
import resource
import secrets
import signal
import socket
import sys
import threading
import time
from collections import OrderedDict
from contextvars import ContextVar
from functools import partial

import anyio
import apsw
import uvicorn
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import DEFAULT_SESSION_IDLE_TIMEOUT

from hybridsql.embedding.embedder import resolve_provider
from hybridsql.errors import EmbeddingError, HybridSQLError, IndexingError, ProjectError
from hybridsql.indexing.index import HybridIndex
from hybridsql.mcp.http_limits import descriptor_limit, limited_protocol
from hybridsql.mcp.keys import EVERYTHING, Keys, digest
from hybridsql.mcp.server import Guard, Indexing, Place, build_server, end_session
from hybridsql.memory import MemoryStore
from hybridsql.search import visible
from hybridsql.search.searcher import QueryVectors

PATH = "/mcp"
# Open indexes kept (least recently used closed first): each holds 3 file descriptors (the file,
# its -wal and -shm) and its page cache; they take at most a third of the process's descriptors,
# the rest stay for clients' sockets.
CACHE_SIZE = min(256, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 9)
MAX_BODY = 4 * 1024 * 1024  # a query may be 1,000,000 characters (search.py): 4 MB as JSON
# The query vectors a server keeps for all its indexes (a vector of 384 floats and its query:
# about 2 KB each).
SHARED_QUERIES = 1024
PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# The project named by the request's URL (None at /mcp), its MCP session id and the grant of
# its key. The SDK runs each message's handler in the context of the HTTP request that carried
# it, and sync tools in worker threads that copy it, so a tool sees its own request's values.
CONNECTION: ContextVar[tuple] = ContextVar("hybridsql_connection", default=(None, None, EVERYTHING))


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port)."""
    host, colon, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise HybridSQLError(f"--http expects HOST:PORT, such as 127.0.0.1:8765, not {text!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_project(name: str) -> str:
    """``name`` if it can name an index file in the data folder, else a ProjectError: a name of
    letters, digits, '.', '_' and '-', starting with a letter or digit, never reaches outside."""
    if PROJECT_NAME.fullmatch(name) and ".." not in name:
        return name
    raise ProjectError(
        f"project names are 1 to 64 letters, digits, '.', '_' or '-', starting with a letter "
        f"or digit, without '..', not {name[:80]!r}"
    )


class Open:
    """An index of the server: opened by its first call, under its guard (so that opening one
    project's file never holds up the others); ``closed`` once the cache let it go."""

    def __init__(self, path: str, embedder, memory_dir: str | None, model=None, vectors=None):
        self.path, self.embedder, self.memory_dir, self.model = path, embedder, memory_dir, model
        self.vectors = vectors
        self.guard = Guard(path)
        self.store = None
        self.identity = None  # (device, inode) of the file it opened
        self.closed = False

    def load(self) -> MemoryStore:
        if self.store is None:
            index = HybridIndex(self.path, embedder=self.embedder, model=self.model)
            index.searcher.shared = self.vectors
            self.store = MemoryStore(index, self.memory_dir)
            st = os.stat(self.path)
            self.identity = (st.st_dev, st.st_ino)
        return self.store

    def moved(self) -> bool:
        """Whether the file it opened was removed or replaced (a restore renames a new one in)
        since: then its connection writes into a file nobody will read again."""
        if self.identity is None:
            return False
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return True
        return (st.st_dev, st.st_ino) != self.identity

    def run(self, fn, *args, **kwargs):
        return fn(self.load(), *args, **kwargs)

    def close(self) -> None:
        with self.guard.lock:  # after the call in progress
            self.closed = True
            if self.store is not None:
                self.store.index.close(damaged=self.guard.broken is not None)


class Projects:
    """The indexes of a server (one per project in ``data_dir``, or ``db`` alone), their open
    connections and the hybridsql sessions of its MCP sessions; ``where`` for build_server."""

    def __init__(
        self, db, data_dir, embedder, project="", memory_dir=None, cache=CACHE_SIZE, model=None
    ):
        self.db, self.data_dir, self.default = db, data_dir, project
        self.embedder, self.memory_dir, self.cache = embedder, memory_dir, cache
        self.model = model
        # The queries' vectors of every index: agents of many projects ask alike, and a query's
        # embedding is half of a hybrid search's time.
        self.vectors = QueryVectors(SHARED_QUERIES)
        self.lock = threading.Lock()
        self.open_indexes: OrderedDict[str, Open] = OrderedDict()
        self.sessions: dict[tuple, list] = {}  # (index key, MCP session id) -> [id, last use]

    def where(self, named: str | None, write: bool = False) -> Place | None:
        url, mcp_session, grant = CONNECTION.get()
        if url is not None and named is not None and named != url:
            raise ToolError(
                f"this connection's URL is for project {url!r}; it cannot use project {named!r}"
            )
        named = url if url is not None else named
        if not grant.covers(named):
            # Before anything is read: the answer is the same whether the project exists.
            if named is not None or not (self.default and grant.covers(self.default)):
                raise ToolError(
                    f"this key does not cover project {named!r}"
                    if named is not None
                    else f"name a project: this key covers {grant.describe()}"
                )
            named = self.default
        if write and not grant.write:
            raise ToolError(f"this key can only read: it cannot change project {named!r}")
        if self.data_dir is None:
            key, project, default = "", named, self.default
        else:
            key = named if named is not None else self.default
            if not key:
                raise ToolError(
                    f"name a project: this server keeps one index per project; connect to "
                    f"{PATH}/PROJECT (or give each tool project)"
                )
            try:
                check_project(key)
            except ProjectError as e:
                raise ToolError(str(e)) from e
            if not write and not self.exists(key):
                return None
            project = default = key
        owner = default if project is None else project
        return Place(
            partial(self.call, key),
            partial(self.session, key, mcp_session, owner),
            project,
            default,
            read_only=not grant.write,
            ahead=partial(self.embed_ahead, key),
        )

    def path(self, key: str) -> str:
        return self.db if self.data_dir is None else os.path.join(self.data_dir, f"{key}.db")

    def exists(self, key: str) -> bool:
        entry = self.open_indexes.get(key)
        if entry is not None and not entry.moved():
            return True
        return os.path.exists(self.path(key))

    def call(self, key: str, fn, *args, **kwargs):
        """``fn(store, *args)`` on the index ``key``, under its guard; an index whose file was
        removed or replaced is closed and opened again (a new file, or the one put in its
        place), so that no write goes into an unlinked file."""
        while True:
            entry = self.open(key)
            if entry.moved():
                with self.lock:
                    if self.open_indexes.get(key) is entry:
                        del self.open_indexes[key]
                    for gone in [k for k in self.sessions if k[0] == key]:
                        del self.sessions[gone]  # they lived in the old file
                print(
                    visible(f"hybridsql mcp: {entry.path} was removed or replaced: opened again"),
                    file=sys.stderr,
                    flush=True,
                )
                entry.close()
                continue
            with entry.guard.lock:
                if not entry.closed:  # else the cache closed it meanwhile: open it again
                    return entry.guard.call(entry.run, fn, *args, **kwargs)

    def embed_ahead(self, key: str, query) -> None:
        """Embeds a search's query for the index ``key`` outside its guard, on this thread's
        own connection (Searcher.embed_ahead), so that one project's requests embed side by
        side and hold its connection for their statements alone. An index not opened yet is
        left to the search; so is any failure, which the search meets again under the guard
        and answers as a tool error."""
        entry = self.open(key)
        store = entry.store
        if store is None or entry.closed:
            return
        with contextlib.suppress(HybridSQLError, apsw.Error):
            store.index.searcher.embed_ahead(query)

    def open(self, key: str) -> Open:
        closing = []
        with self.lock:
            entry = self.open_indexes.get(key)
            if entry is None:
                entry = self.open_indexes[key] = Open(
                    self.path(key), self.embedder, self.memory_dir, self.model, self.vectors
                )
                while len(self.open_indexes) > self.cache:
                    closing.append(self.open_indexes.popitem(last=False)[1])
            self.open_indexes.move_to_end(key)
        for old in closing:
            old.close()
        return entry

    def session(self, key: str, mcp_session: str | None, project: str) -> int:
        """The hybridsql session of this MCP session in this index, started on first use."""
        found = self.sessions.get((key, mcp_session))
        if found is None:

            def start(store):  # under the index's guard: one start per index and MCP session
                if (key, mcp_session) not in self.sessions:
                    session_id = store.start_session(project).id
                    self.sessions[(key, mcp_session)] = [session_id, time.monotonic()]
                return self.sessions[(key, mcp_session)]

            found = self.call(key, start)
        found[1] = time.monotonic()
        return found[0]

    def end_sessions(self, mcp_session=..., idle_for: float | None = None) -> None:
        """Ends the hybridsql sessions of one MCP session (all if ``mcp_session`` is not given),
        or those unused for ``idle_for`` seconds."""
        now = time.monotonic()
        with self.lock:
            ending = [
                (k, self.sessions.pop(k)[0])
                for k, (_, used) in list(self.sessions.items())
                if (mcp_session is ... or k[1] == mcp_session)
                and (idle_for is None or now - used > idle_for)
            ]
        for (key, _), session_id in ending:
            try:
                self.call(key, end_session, session_id)
            except ToolError as e:  # a damaged index: its sessions stay open
                print(visible(f"hybridsql mcp: {e}"), file=sys.stderr)

    def close(self) -> None:
        self.end_sessions()
        with self.lock:
            entries, self.open_indexes = list(self.open_indexes.values()), OrderedDict()
        for entry in entries:
            entry.close()


async def reply(send, status: int, message: str, headers=()) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Gate:
    """ASGI middleware before the SDK's app: refuses requests without a valid bearer token or
    key (401, nothing read), takes the project from ``/mcp/PROJECT`` and refuses one the key
    does not cover (403), binds each MCP session to the project and key that opened it, and
    ends an MCP session's hybridsql sessions when the client ends it (DELETE)."""

    def __init__(self, app, token: str | None, projects: Projects, keys: Keys | None = None):
        self.app, self.projects, self.keys = app, projects, keys
        self.expected = None if token is None else f"Bearer {token}".encode()
        # MCP session id -> (the URL's project, the digest of the key, last use)
        self.bound: dict[str, list] = {}

    def grant(self, authorization: bytes):
        if self.keys is not None:
            return self.keys.grant(authorization)
        if self.expected is None or secrets.compare_digest(authorization, self.expected):
            return EVERYTHING
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        authorization = headers.get(b"authorization", b"")
        grant = self.grant(authorization)
        if grant is None:
            return await reply(
                send,
                401,
                "this server needs the header Authorization: Bearer TOKEN",
                [(b"www-authenticate", b'Bearer realm="hybridsql"')],
            )
        project, path = None, scope["path"]
        if path.startswith(PATH + "/"):
            try:
                project = check_project(path[len(PATH) + 1 :])
            except ProjectError as e:
                return await reply(send, 400, str(e))
            scope = dict(scope, path=PATH, raw_path=PATH.encode())
            if not grant.covers(project):
                return await reply(send, 403, f"this key does not cover project {project!r}")
        mcp_session = headers.get(b"mcp-session-id", b"").decode("latin-1") or None
        holder = digest(authorization)
        if mcp_session is not None:
            bound = self.bound.get(mcp_session)
            if bound is not None:
                if bound[:2] != [project, holder]:
                    return await reply(
                        send,
                        403,
                        "this MCP session was opened for another project or key: open a new one",
                    )
                bound[2] = time.monotonic()
        CONNECTION.set((project, mcp_session, grant))
        if mcp_session is None:

            async def opening(message):
                # The response that gives a new MCP session its id: bind it to this request's
                # project and key.
                if message["type"] == "http.response.start":
                    for name, value in message.get("headers", ()):
                        if name.lower() == b"mcp-session-id":
                            self.bound[value.decode("latin-1")] = [
                                project,
                                holder,
                                time.monotonic(),
                            ]
                await send(message)

            return await self.app(scope, receive, opening)
        if scope["method"] != "DELETE":
            return await self.app(scope, receive, send)

        async def sending(message):
            # Before the client hears that its session is over: then its sessions are ended.
            if message["type"] == "http.response.start" and message["status"] < 300:
                await anyio.to_thread.run_sync(self.projects.end_sessions, mcp_session)
                self.bound.pop(mcp_session, None)
            await send(message)

        await self.app(scope, receive, sending)

    def forget_idle(self, idle_for: float) -> None:
        """Lets go of the bindings of sessions unused for ``idle_for`` seconds (the SDK has
        ended them by then)."""
        now = time.monotonic()
        for mcp_session, (_, _, used) in list(self.bound.items()):
            if now - used > idle_for:
                self.bound.pop(mcp_session, None)


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket. Made as a TCP one by name: asyncio turns Nagle's algorithm off on
    the connections it accepts only when their protocol says TCP, and with Nagle on, an answer
    sent as headers then body waited for the client's delayed ACK of the headers (40 ms on
    Linux) on every request of a kept-alive connection after its first."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise HybridSQLError(f"cannot listen on {host}:{port}: {e.strerror}") from e
    return sock


def serve_http(
    address: str,
    db: str | None = None,
    data_dir: str | None = None,
    memory_dir: str | None = None,
    project: str = "",
    embedder=None,
    token: str | None = None,
    keys_file: str | None = None,
    model=None,
) -> None:
    """Serves MCP over streamable HTTP at ``address`` until SIGINT or SIGTERM. Each index is
    searched with the model it records (the local provider's models are read once a process
    and shared), unless ``model`` names one; another provider is made once for all."""
    host, port = parse_address(address)
    if (db is None) == (data_dir is None):
        raise HybridSQLError(
            "give either --db FILE (one index) or --data-dir DIR (one per project)"
        )
    if token is not None and keys_file is not None:
        raise HybridSQLError(
            "give either --keys FILE (keys per project) or a token (one key for everything)"
        )
    if token is None and keys_file is None and not is_loopback(host):
        raise HybridSQLError(
            f"{host} is not a loopback address: set a token in HYBRIDSQL_TOKEN (or --token), or "
            "keys with --keys FILE, so that only clients that send one are served"
        )
    keys = None if keys_file is None else Keys(keys_file, check_project)
    if memory_dir is not None and data_dir is not None:
        raise HybridSQLError("--memory-dir needs --db: with --data-dir each project has an index")
    if memory_dir is not None and not os.path.isdir(memory_dir):
        raise IndexingError(f"{memory_dir} is not a folder")
    if data_dir is not None:
        if project:
            check_project(project)
        os.makedirs(data_dir, exist_ok=True)
    spec = (embedder or os.environ.get("HYBRIDSQL_EMBEDDER") or "auto").strip()
    if spec.lower() in ("auto", "local"):
        shared = spec  # each index's own model: HybridIndex finds it in the index
    elif model is not None:
        raise EmbeddingError(
            f"--model names a model of hybridsql's own engine, for the local provider; with"
            f" --embedder {spec}, name its model there"
        )
    else:
        shared = resolve_provider(embedder) or "none"  # one provider for every project
    projects = Projects(db, data_dir, shared, project, memory_dir, model=model)
    indexing = None
    try:
        if db is not None:
            projects.open("").load()  # made or upgraded before the indexing thread opens it
            if memory_dir is not None:
                indexing = Indexing(db, memory_dir, shared, model)
                indexing.thread.start()
        server = build_server(projects.where, indexing)
        if data_dir is not None:  # it writes to a memory folder, which only --db has
            server.remove_tool("extract_memory")
        app = server.streamable_http_app(
            streamable_http_path=PATH,
            max_request_body_size=MAX_BODY,
            host=host,
            # Each answer as one JSON body, not an SSE stream: a stream costs the server a task,
            # a memory channel and event framing per request, and its tools send nothing before
            # their result.
            json_response=True,
        )
        sock = listening_socket(host, port)
        where = f"{db}" if db is not None else f"one index per project in {data_dir}"
        bound = sock.getsockname()[1]
        print(
            visible(f"hybridsql mcp: http://{address.rpartition(':')[0]}:{bound}{PATH} ({where})"),
            file=sys.stderr,
            flush=True,
        )
        anyio.run(run, Gate(app, token, projects, keys), sock, projects)
    finally:
        if indexing is not None:
            indexing.stop.set()
            indexing.thread.join()
        projects.close()


async def run(app: Gate, sock, projects: Projects) -> None:
    # Half the descriptors for clients' connections (the index cache takes at most a third).
    total = descriptor_limit() // 2

    def keyed(headers) -> bool:
        return app.grant(dict(headers).get(b"authorization", b"")) is not None

    config = uvicorn.Config(
        app, log_level="warning", timeout_graceful_shutdown=5, http=limited_protocol(total, keyed)
    )
    server = uvicorn.Server(config)
    # uvicorn re-raises the signal that stopped it once it has shut down: SIGTERM's default
    # action would then kill the process before its sessions are ended and indexes closed.
    signal.signal(signal.SIGTERM, lambda *_: None)
    async with anyio.create_task_group() as tasks:

        async def sweep():
            while True:
                await anyio.sleep(60)
                await anyio.to_thread.run_sync(
                    partial(projects.end_sessions, idle_for=DEFAULT_SESSION_IDLE_TIMEOUT)
                )
                app.forget_idle(DEFAULT_SESSION_IDLE_TIMEOUT)

        tasks.start_soon(sweep)
        await server.serve(sockets=[sock])
        tasks.cancel_scope.cancel()
