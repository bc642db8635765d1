"""The memory store as an MCP server over stdio: ``hybridsql mcp --db FILE --memory-dir DIR``.

Built on the official ``mcp`` SDK (the ``mcp`` extra). The server answers at once and indexes
the memory folder in the background (a first index of a large folder takes minutes, past
clients' start-up timeouts); searches meanwhile see the files indexed so far and say how far
indexing got. One server process is one agent session: it opens a session when it starts,
links every memory the agent adds, supersedes, reinforces or gets back from search_memory to
it, and closes it with a count of those uses when the client goes away. Every tool answers
with JSON; a failure the store foresees (unknown id, bad sector) comes back as a tool error
with the store's message.
"""

import json
import os
import sys
import threading
from typing import Annotated, Literal

import anyio
import apsw
import mcp_types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import Field, ValidationError

from hybridsql import __version__
from hybridsql.db.extension import DAMAGED, file_error
from hybridsql.errors import HybridSQLError, IndexingError
from hybridsql.indexing.index import HybridIndex, IndexReport, Progress
from hybridsql.indexing.watch import Stopped, watch_folder
from hybridsql.memory import (
    MAX_NAME_CHARS,
    MAX_TAGS,
    SECTORS,
    TIERS,
    MemorySearch,
    MemoryStore,
)
from hybridsql.options import tool_signature
from hybridsql.search import MAX_RESULTS, clean_text, visible, whole

Sector = Literal[SECTORS]
Tier = Literal[TIERS]
# A name (a project, a note's title, topic or tag) as the tools' JSON schema bounds it.
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
Tags = Annotated[list[Name], Field(max_length=MAX_TAGS)]

TOOLS = (
    "search_memory",
    "extract_memory",
    "add",
    "supersede",
    "reinforce",
    "timeline",
    "recent_memories",
    "delete",
)

INSTRUCTIONS = """Long-term memory in a SQLite file. search_memory before answering from \
memory; add what you learn (one fact per memory); supersede a memory that became wrong instead \
of adding a contradicting one; reinforce what proved useful; recent_memories to catch up on a \
project; extract_memory to write a note to the memory folder that people also read."""


class Guard:
    """Runs the store's calls one at a time (sync tools run in worker threads; the store has one
    connection) and turns their failures into tool errors with the store's one-line message.
    Once the database is found damaged, every later call fails with that message: nothing more
    is written to it."""

    def __init__(self, db_path: str):
        self.db_path = db_path
        # Reentrant: the HTTP server holds it around a call to check that the index is still open.
        self.lock = threading.RLock()
        self.broken = None

    def call(self, fn, *args, **kwargs):
        with self.lock:
            if self.broken is not None:
                raise ToolError(self.broken)
            try:
                return fn(*args, **kwargs)
            except HybridSQLError as e:
                raise ToolError(str(e)) from e
            except apsw.Error as e:
                problem = file_error(e, self.db_path)
                if problem is None:
                    raise
                if isinstance(e, DAMAGED):
                    self.broken = str(problem)
                raise ToolError(str(problem)) from e


class Indexing(Progress):
    """Indexes the memory folder in a thread with its own HybridIndex (an SQLite connection
    belongs to one thread), then keeps it fresh as files change (watch.py) until the server
    stops. Each file is committed alone, so searches on the server's own connection see every
    file indexed so far and never wait for a batch. It is also the progress that index_folder
    reports to: between files it stops when asked."""

    def __init__(self, db_path: str, memory_dir: str, embedder, model=None):
        self.report = IndexReport()
        self.memory_dir = memory_dir
        self.finished = False
        self.error = None
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run,
            args=(db_path, memory_dir, embedder, model),
            name="hybridsql-indexing",
        )

    def _run(self, db_path, memory_dir, embedder, model) -> None:
        try:
            with HybridIndex(db_path, embedder=embedder, model=model) as index:
                watch_folder(
                    index,
                    memory_dir,
                    self.stop,
                    progress=self,
                    report=self.report,
                    on_ready=self._ready,
                    on_failure=self._failed,
                )
        except Exception as e:  # a thread's failure would otherwise go unseen: searches say it
            problem = file_error(e, db_path) if isinstance(e, apsw.Error) else None
            self.error = str(problem or e)
            print(
                visible(f"hybridsql mcp: indexing {memory_dir} failed: {self.error}"),
                file=sys.stderr,
            )
        finally:
            self.finished = True

    def _ready(self, r: IndexReport) -> None:
        self.finished = True
        print(
            visible(
                f"hybridsql mcp: {self.memory_dir}: {r.files_indexed} files indexed, "
                f"{r.files_unchanged} unchanged; watching it for changes"
            ),
            file=sys.stderr,
        )

    def _failed(self, error: Exception) -> None:
        print(
            visible(f"hybridsql mcp: re-indexing {self.memory_dir} failed: {error}"),
            file=sys.stderr,
        )

    def update(self, done: int, label: str) -> None:
        if self.stop.is_set():
            raise Stopped

    def note(self) -> str | None:
        """How far indexing got, while it runs or when it failed; None once it is done."""
        r = self.report
        so_far = f"{r.files_indexed + r.files_unchanged} of {r.files_seen} files"
        if self.error is not None:
            return f"indexing the memory folder failed after {so_far}: {self.error}"
        if self.finished:
            return None
        return f"indexing: {so_far}; documents found are those indexed so far"


def search_both(store: MemoryStore, query: str, documents: int, decay, group_by_file, **options):
    """search_memory's two searches, its memories' (``options``: MemorySearch's fields) and up
    to ``documents`` passages of the memory folder's files, in one call: one wait for the
    index's guard, not two, so that other requests do not queue between them (a server's tail
    latency, docs/benchmarks.md) and no write lands between the two."""
    found = store.search(query, **options)
    docs = []
    if documents > 0:
        docs = store.search_documents(
            query, options.get("project"), documents, decay, group_by_file
        )
    return found, docs


# What a read-only place may run (an HTTP server's read key): nothing that writes (its
# searches are told reinforce=False).
READS = frozenset(
    {
        MemoryStore.search,
        MemoryStore.search_documents,
        search_both,
        MemoryStore.timeline,
        MemoryStore.recent,
    }
)


class Place:
    """Where one tool call works: ``call(MemoryStore.method, *args)`` runs the method on its
    store under its guard; ``session()`` is the session it links to (started on first use);
    ``project`` is the project it names (None: all of them, for searches), ``default`` the
    project of new memories when it names none. A ``read_only`` place (a key that may only
    read) runs READS alone and has no session."""

    def __init__(
        self, call, session, project: str | None, default: str, read_only=False, ahead=None
    ):
        self._call = call
        self._session = session
        self._ahead = ahead
        self.project = project
        self.default = default
        self.read_only = read_only

    def refuse(self):
        return ToolError(f"this key can only read project {self.owner!r}: it cannot change it")

    def call(self, fn, *args, **kwargs):
        if self.read_only and fn not in READS:
            raise self.refuse()
        return self._call(fn, *args, **kwargs)

    def embed_ahead(self, query) -> None:
        """Embeds a search's query before its call takes the index's lock, where the place
        can (an HTTP server's, whose requests run side by side)."""
        if self._ahead is not None:
            self._ahead(query)

    def session(self):
        if self.read_only:
            raise self.refuse()
        return self._session()

    @property
    def owner(self) -> str:
        return self.default if self.project is None else self.project


def one_store(store: MemoryStore, session_id: int, project: str = "", guard: Guard | None = None):
    """``where`` for a server of one store and one session: the project a tool names is a
    filter within that store."""
    guard = guard or Guard(store.index.db_path)

    def call(fn, *args, **kwargs):
        return guard.call(fn, store, *args, **kwargs)

    def where(named: str | None, write: bool = False) -> Place:
        return Place(call, lambda: session_id, named, project)

    return where


NOTHING_YET = "no memory has been written to this project yet"

# The default budget of one tool's answer, in characters of JSON: what an agent can afford to
# read in one call. A caller may ask for more, up to MAX_CHARS_LIMIT.
MAX_CHARS, MIN_CHARS, MAX_CHARS_LIMIT = 20_000, 1_000, 1_000_000
TEXTS = ("content", "snippet")  # the fields that hold a memory's or a passage's text
SHORTEST = 200  # no text is shortened below this many characters before items are left out


def _size(answer: dict) -> int:
    return len(json.dumps(answer))


def _shorten(item, share: int) -> int:
    """Shortens the TEXTS fields of ``item`` (nested dicts too) to ``share`` characters and an
    ellipsis; the number shortened."""
    done = 0
    for key, value in item.items():
        if isinstance(value, dict):
            done += _shorten(value, share)
        elif key in TEXTS and isinstance(value, str) and len(value) > share:
            item[key] = value[:share] + "…"
            done += 1
    return done


def bounded(answer: dict, lists: tuple, max_chars: int) -> dict:
    """``answer`` cut to at most ``max_chars`` characters of JSON: first each text of the items
    of its ``lists`` to a fair share of the budget, then the last (lowest ranked) items left out;
    ``cut`` then says what was cut, so the caller knows."""
    if not whole(max_chars) or not MIN_CHARS <= max_chars <= MAX_CHARS_LIMIT:
        raise ToolError(
            f"max_chars must be an integer from {MIN_CHARS} to {MAX_CHARS_LIMIT}, not {max_chars!r}"
        )
    if _size(answer) <= max_chars:
        return answer
    items = [item for name in lists for item in answer[name]]
    share = max(SHORTEST, (max_chars - 400) // (2 * max(1, len(items))))
    shortened = sum(_shorten(item, share) for item in items)
    left_out = 0
    for name in reversed(lists):
        while answer[name] and _size(answer) > max_chars - 200:
            answer[name].pop()
            left_out += 1
    answer["cut"] = (
        f"cut to max_chars={max_chars}: {shortened} texts shortened, {left_out} results left out;"
        " ask with a larger max_chars or a narrower query for more"
    )
    return answer


def _as_sent(value) -> str:
    """``value`` as an error line quotes it: as JSON, cut (a refused text may be megabytes)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:79] + "…"


# What each JSON type of a tool's schema takes, as Python reads JSON: true is no integer, nor is
# 1e2 (a float) or "1".
JSON_TYPES = {
    "integer": ("an integer", whole),
    "number": ("a number", lambda v: whole(v) or isinstance(v, float)),
    "string": ("text", lambda v: isinstance(v, str)),
    "boolean": ("true or false", lambda v: isinstance(v, bool)),
    "array": ("a list", lambda v: isinstance(v, list)),
    "null": ("null", lambda v: v is None),
}


def refusal(schema: dict, value) -> tuple[str, str, str] | None:
    """Why ``value`` does not fit ``schema`` (the JSON Schema that pydantic writes for a tool's
    parameter: a type, an enum, anyOf, maxLength, maxItems and items): (which part, what it
    must be, what it is), or None when it fits. Stricter than the SDK, which reads true, "1"
    and 1e2 as the integers 1, 1 and 100."""
    if "anyOf" in schema:
        options = schema["anyOf"]
        reasons = [refusal(option, value) for option in options]
        if None in reasons:
            return None
        part, rule, shown = next(
            (r for r, o in zip(reasons, options, strict=True) if o.get("type") != "null"),
            reasons[0],
        )
        nullable = not part and any(o.get("type") == "null" for o in options)
        return part, rule + (" or null" if nullable else ""), shown
    if "enum" in schema and not any(type(value) is type(e) and value == e for e in schema["enum"]):
        return "", f"one of {', '.join(map(str, schema['enum']))}", _as_sent(value)
    kind = schema.get("type")
    if kind in JSON_TYPES:
        what, fits = JSON_TYPES[kind]
        if not fits(value):
            return "", what, _as_sent(value)
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return "", f"at most {schema['maxLength']:,} characters", f"{len(value):,}"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return "", f"a list of at most {schema['maxItems']} items", f"{len(value):,}"
    for i, item in enumerate(value if kind == "array" else ()):
        why = refusal(schema.get("items", {}), item)
        if why is not None:
            return f" item {i}{why[0]}", why[1], why[2]
    return None


def _repaired(value):
    """``value`` (parsed JSON) with lone surrogates in its texts, keys too, as U+FFFD."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_repaired(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): _repaired(v) for k, v in value.items()}
    return value


async def unreadable(error: Exception, write_stream) -> SessionMessage | None:
    """What the SDK's stdio reader could not read (``error``, its ValidationError): the message
    itself, read by Python's JSON parser (which takes lone surrogate escapes) and repaired;
    else None, once a request with an id has been answered with a JSON-RPC error (a line that
    is no JSON at all with one of id null, as JSON-RPC asks)."""
    details = error.errors() if isinstance(error, ValidationError) else []
    given = next((d["input"] for d in details if d["type"] == "json_invalid"), None)
    if given is None:  # JSON, but no message: some error of the union quotes all of it
        given = next((d["input"] for d in details if isinstance(d["input"], dict)), None)
    if given is None:
        return None
    if isinstance(given, str):
        try:
            given = json.loads(given)
        except (ValueError, RecursionError) as e:
            await _answer(write_stream, None, mcp_types.PARSE_ERROR, f"the line is no JSON: {e}")
            return None
    message = _repaired(given)
    try:
        return SessionMessage(
            mcp_types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        )
    except ValidationError as e:
        request_id = message.get("id") if isinstance(message, dict) else None
        if whole(request_id) or isinstance(request_id, str):
            why = f"not a JSON-RPC request: {e.errors()[0]['msg']}"
            await _answer(write_stream, request_id, mcp_types.INVALID_REQUEST, why)
        return None


async def _answer(write_stream, request_id, code: int, message: str) -> None:
    error = mcp_types.ErrorData(code=code, message=message)
    answer = mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
    await write_stream.send(SessionMessage(answer))


def listed(schema: dict, value):
    """``value`` as the SDK reads it: a list sent as JSON text, where the schema takes a list
    (some clients send every list so), is that list."""
    takes_list = any(o.get("type") == "array" for o in schema.get("anyOf", [schema]))
    if takes_list and isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            return value
        return parsed if isinstance(parsed, list) else value
    return value


class StrictServer(MCPServer):
    """An MCPServer that refuses, with one line, a tool call naming an argument the tool does
    not take (the SDK drops those silently, so a misspelt ``limt=5`` would be a search with the
    default limit), leaving out one it needs, or giving one that its schema does not allow
    (the SDK reads ``true`` as the id 1). Over stdio, a request the SDK cannot read gets an
    answer too (``run_stdio_async``)."""

    async def call_tool(self, name, arguments, context=None):
        # The tool's own schema, not list_tools(): that builds every tool's description, a
        # cost each call paid for one schema.
        tool = self._tool_manager.get_tool(name)
        schema = None if tool is None else tool.parameters
        if schema is not None:
            properties = schema.get("properties", {})
            valid = list(properties)
            unknown = [key for key in arguments if key not in valid]
            if unknown:
                raise ToolError(
                    f"{name}: unknown argument{'s' if len(unknown) > 1 else ''}"
                    f" {', '.join(map(repr, unknown))}; valid arguments: {', '.join(valid)}"
                )
            missing = [key for key in schema.get("required", ()) if key not in arguments]
            if missing:
                raise ToolError(f"{name}: {', '.join(map(repr, missing))} must be given")
            for key, value in arguments.items():
                why = refusal(properties[key], listed(properties[key], value))
                if why is not None:
                    part, rule, shown = why
                    raise ToolError(f"{name}: {key}{part} must be {rule}, not {shown}")
        return await super().call_tool(name, arguments, context)

    async def run_stdio_async(self) -> None:
        """Serves over stdio as the SDK does, but for a line that the SDK's reader cannot take:
        its lone surrogate escapes (``"\\ud800"``), which pydantic's JSON parser refuses, are
        read as U+FFFD, as invalid UTF-8 on the wire is; a line that is still no message is
        answered with a JSON-RPC error where it has an id. The SDK drops such a line, and the
        client waited for an answer until it gave up."""
        async with stdio_server() as (read_stream, write_stream):
            send, receive = anyio.create_memory_object_stream(0)

            async def repair():
                async with send:
                    async for item in read_stream:
                        read = item
                        if isinstance(item, Exception):
                            read = await unreadable(item, write_stream)
                        if read is not None:
                            await send.send(read)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(repair)
                server = self._lowlevel_server
                await server.run(receive, write_stream, server.create_initialization_options())


def build_server(where, indexing: Indexing | None = None) -> MCPServer:
    """A StrictServer whose tools work where ``where(project, write)`` says (a Place, or None
    for a project that holds nothing yet and is only read); searches say how far ``indexing``
    got while it runs."""
    server = StrictServer("hybridsql", instructions=INSTRUCTIONS, version=__version__)

    def by_id(memory_id: int, project: str | None) -> Place:
        """The place of a tool that names a memory by id: the index of ``project`` (or the
        connection's) where the server keeps one per project; a project with no index yet
        holds no memory."""
        place = where(project)
        if place is None:
            raise ToolError(f"no memory with id {memory_id}")
        return place

    def search_memory(
        query: str,
        documents: int = 5,
        decay: bool = True,
        group_by_file: bool = False,
        max_chars: int = MAX_CHARS,
        **options,
    ) -> dict:
        """Search memories by meaning and by keyword (word prefixes match: "auth" finds
        "authentication"). Returns ranked memories, each with its score, a snippet with the
        matches in <mark>, the session that created it and, when include_superseded, the memory
        that superseded it; and up to `documents` matching passages of the memory folder's files.
        Filters (project, sector, tier, min_salience, session_id: memories that session used)
        apply before ranking. Superseded memories are left out unless include_superseded.
        Each memory returned is linked to this session as recalled and gains a little salience
        (once per session, fading over days), so what searches found before ranks a little
        higher later; reinforce=false only looks. Dated
        notes (memory/YYYY-MM-DD.md) lose half their score every 30 days; decay=false ranks
        them by relevance alone. A file gives at most two passages, its neighbouring matches
        merged into them, the lines of its other matches in other_ranges; group_by_file: one
        passage per file. max_chars bounds the answer (texts shortened, then the lowest ranked
        results left out; `cut` then says so)."""
        if not 0 <= documents <= MAX_RESULTS:  # before the search records its recalls
            raise ToolError(f"documents must be from 0 to {MAX_RESULTS}, not {documents!r}")
        place = where(options.pop("project", None))
        if place is None:
            return {"memories": [], "documents": [], "notes": [NOTHING_YET]}
        if place.read_only:  # a read key only looks
            options["reinforce"] = False
        reinforce = options.get("reinforce", True)
        if options.get("mode", "hybrid") != "keyword":
            place.embed_ahead(query)
        found, docs = place.call(
            search_both,
            query,
            documents,
            decay,
            group_by_file,
            project=place.project,
            recalled_in=place.session() if reinforce else None,
            **options,
        )
        keys = ("path", "start_line", "end_line", "other_ranges", "snippet", "score")
        note = indexing.note() if indexing is not None else None
        answer = {
            "memories": [hit.as_dict() for hit in found],
            "documents": [{k: getattr(r, k) for k in keys} for r in docs],
            "notes": found.notes + ([note] if note else []),
        }
        return bounded(answer, ("memories", "documents"), max_chars)

    # The memory filters are MemorySearch's fields; this session is where recalls are linked.
    search_memory.__signature__ = tool_signature(search_memory, MemorySearch, ("recalled_in",))
    server.tool()(search_memory)

    @server.tool()
    def extract_memory(topic: Name, title: Name, content: str, tags: Tags | None = None) -> dict:
        """Write a note to today's memory/YYYY-MM-DD.md in the memory folder (a `## title`
        section with topic, tags and time) and index it at once. Use it for what people should
        also be able to read; returns the file, its lines and the chunk ids indexed. topic,
        title and each tag are one line, of the length the schema allows."""
        place = where(None, write=True)
        return place.call(MemoryStore.extract_memory, topic, title, content, tags).as_dict()

    @server.tool()
    def add(
        content: str,
        sector: Sector = "semantic",
        tier: Tier = "project",
        salience: float = 0.5,
        project: Name | None = None,
    ) -> dict:
        """Remember one thing. sector: semantic (a fact), episodic (an event), procedural (how
        to do something), emotional (how someone feels about something), reflective (a lesson
        drawn). tier: session, project or global. salience in [0, 1]: how much it matters.
        project defaults to the server's project. Returns the stored memory with its id."""
        place = where(project, write=True)
        memory = place.call(
            MemoryStore.add, content, place.owner, sector, tier, salience, place.session()
        )
        return memory.as_dict()

    @server.tool()
    def supersede(
        memory_id: int, content: str, salience: float | None = None, project: Name | None = None
    ) -> dict:
        """Replace a memory that is no longer true with a new one (same project, sector and
        tier). The old one stays, marked superseded; search leaves it out unless asked.
        project: with one index per project (an HTTP server's --data-dir), the memory's project
        (default: the URL's); elsewhere ids are unique and it is not needed."""
        place = by_id(memory_id, project)
        memory = place.call(
            MemoryStore.supersede, memory_id, content, session_id=place.session(), salience=salience
        )
        return memory.as_dict()

    @server.tool()
    def reinforce(memory_id: int, amount: float = 0.1, project: Name | None = None) -> dict:
        """Raise a memory's salience by `amount` (capped at 1) because it proved useful.
        project: with one index per project (an HTTP server's --data-dir), the memory's project
        (default: the URL's); elsewhere ids are unique and it is not needed."""
        place = by_id(memory_id, project)
        return place.call(MemoryStore.reinforce, memory_id, amount, place.session()).as_dict()

    @server.tool()
    def timeline(
        memory_id: int,
        before: int = 5,
        after: int = 5,
        project: Name | None = None,
        max_chars: int = MAX_CHARS,
    ) -> dict:
        """The memories of this memory's project just before and after it in time, oldest first
        (offset 0 is this memory), each with the session that created it. Only reads: it
        reinforces nothing. project: with one index per project (an HTTP server's --data-dir),
        the memory's project (default: the URL's); elsewhere ids are unique and it is not
        needed. max_chars bounds the answer, as search_memory's."""
        entries = by_id(memory_id, project).call(MemoryStore.timeline, memory_id, before, after)
        return bounded({"entries": [e.as_dict() for e in entries]}, ("entries",), max_chars)

    @server.tool()
    def recent_memories(
        project: Name | None = None,
        limit: int = 10,
        include_superseded: bool = False,
        max_chars: int = MAX_CHARS,
    ) -> dict:
        """The latest memories of a project (default: the server's), newest first (offset 0,
        then -1, -2...), each with the session that created it. Only reads: unlike
        search_memory, it reinforces nothing and links nothing to this session. max_chars
        bounds the answer, as search_memory's."""
        place = where(project)
        if place is None:
            return {"entries": []}
        entries = place.call(MemoryStore.recent, place.owner, limit, include_superseded)
        return bounded({"entries": [e.as_dict() for e in entries]}, ("entries",), max_chars)

    @server.tool()
    def delete(memory_id: int, hard: bool = False, project: Name | None = None) -> dict:
        """Forget a memory: no search or timeline returns it again. hard: remove it and its
        text from the database, not only mark it (a memory deleted before too). project: with
        one index per project (an HTTP server's --data-dir), the memory's project (default: the
        URL's); elsewhere ids are unique and it is not needed."""
        by_id(memory_id, project).call(MemoryStore.delete, memory_id, hard)
        return {"deleted": memory_id, "hard": hard}

    return server


def end_session(store: MemoryStore, session_id: int) -> None:
    """Closes an MCP client's session with a count of the memories it used, by kind."""
    uses = store.conn.execute(
        "select usage, count(*) from session_memories where session_id = ?"
        " group by usage order by usage",
        (session_id,),
    ).fetchall()
    summary = ", ".join(f"{usage} {n}" for usage, n in uses) or "no memories used"
    store.end_session(session_id, f"MCP session: {summary}")


def serve(
    db_path: str,
    memory_dir: str | None = None,
    project: str = "",
    embedder=None,
    model=None,
) -> None:
    """Serves MCP on stdin/stdout until EOF, indexing ``memory_dir`` (incrementally) meanwhile.
    ``embedder`` and ``model`` as HybridIndex takes them: by default, the index's own model."""
    if memory_dir is not None and not os.path.isdir(memory_dir):  # said now, not in a search
        raise IndexingError(f"{memory_dir} is not a folder")
    # made or upgraded before the thread opens it
    index = HybridIndex(db_path, embedder=embedder, model=model)
    indexing = None
    try:
        store = MemoryStore(index, memory_dir)
        session = store.start_session(project)
        guard = Guard(db_path)
        if memory_dir is not None:
            indexing = Indexing(db_path, memory_dir, embedder, model)
            indexing.thread.start()
        try:
            build_server(one_store(store, session.id, project, guard), indexing).run("stdio")
        finally:
            if indexing is not None:
                indexing.stop.set()
                indexing.thread.join()
            if guard.broken is None:  # a damaged database gets no session summary
                end_session(store, session.id)
    except BaseException as e:
        index.close(damaged=isinstance(e, DAMAGED))
        raise
    index.close(damaged=guard.broken is not None)
