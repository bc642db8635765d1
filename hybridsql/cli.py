"""The ``hybridsql`` command: index a memory folder, search it, and find the SQL extension."""

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, fields

import apsw

from hybridsql import __version__
from hybridsql.errors import HybridSQLError, IndexingError
from hybridsql.extension import file_error, loadable_path
from hybridsql.search import BACKENDS, FUSIONS, MODES, SearchOptions, explain_sql, visible

EMBEDDERS = ("auto", "local", "openai", "none")


def cmd_path(args) -> int:
    print(loadable_path())
    return 0


# How a command opens its database: "create" makes or upgrades the index (commands that add
# content), "write" needs an index that exists (commands that change one), "read" opens
# read-only and writes nothing.
OPENINGS = {
    "create": {"readonly": False, "create": True},
    "write": {"readonly": False, "create": False},
    "read": {"readonly": True, "create": False},
}


def open_index(args, opening: str):
    from hybridsql.index import HybridIndex

    return HybridIndex(args.db, embedder=args.embedder, **OPENINGS[opening])


def cmd_index(args) -> int:
    if not os.path.isdir(args.dir):  # before the database is made
        raise IndexingError(f"{args.dir} is not a folder")
    with open_index(args, "create") as idx:
        report = idx.index_folder(args.dir)
    if args.json or not sys.stdout.isatty():
        print(json.dumps(asdict(report)))
        return 0
    print(
        f"{report.files_seen} files: {report.files_indexed} indexed, "
        f"{report.files_unchanged} unchanged, {report.files_deleted} deleted; "
        f"{report.chunks_written} chunks written, {report.chunks_embedded} embedded "
        f"in {report.seconds:.1f}s"
    )
    if idx.embedder is None:
        print("no embedding provider: the index is keyword-only")
    for path, reason in report.skipped:
        print(visible(f"skipped {path}: {reason}"))
    for path, warning in report.warnings:
        print(visible(f"warning {path}: {warning}"))
    return 0


def cmd_search(args) -> int:
    names = [f.name for f in fields(SearchOptions)]
    options = {name: getattr(args, name) for name in names if hasattr(args, name)}
    SearchOptions(**options).check()  # before the database is opened
    with open_index(args, "read") as idx:
        found = idx.search(args.query, **options)
    if args.explain:
        print(f"-- {len(found)} results; backend {found.backend}; mode {found.mode}")
        print(f"-- run after: .load {loadable_path()}")
        print(explain_sql(found.sql, found.params))
        return 0
    if args.json or not sys.stdout.isatty():
        print(
            json.dumps(
                {
                    "query": args.query,
                    "mode": found.mode,
                    "backend": found.backend,
                    "notes": found.notes,
                    "results": [r.as_dict() for r in found],
                },
                ensure_ascii=False,
            )
        )
        return 0
    for note in found.notes:
        print(visible(f"note: {note}"))
    if not found.results:
        print("no results")
    for r in found:
        where = (
            f"{r.path}:{r.start_line}-{r.end_line}" if r.kind == "document" else f"memory {r.id}"
        )
        vector = "-" if r.vector_score is None else f"{r.vector_score:.3f}"
        keyword = "-" if r.keyword_score is None else f"{r.keyword_score:.3f}"
        also = ", ".join(f"{start}-{end}" for start, end in r.other_ranges)
        print(
            f"{r.score:.3f}  {visible(where)}  [{r.match_type}: vector {vector}, "
            f"keyword {keyword}, decay {r.decay:.2f}]" + (f" also lines {also}" if also else "")
        )
        print("       " + terminal_snippet(r.snippet))
    return 0


def terminal_snippet(snippet: str, width: int = 200) -> str:
    """A snippet on one line for a terminal: <mark> as bold, cut at ``width`` characters, and
    the control characters of the text made visible (see ``visible``)."""
    out, shown, bold = [], 0, False
    for piece in re.split(r"(</?mark>)", snippet.replace("\n", " ")):
        if piece in ("<mark>", "</mark>"):
            bold = piece == "<mark>"
            out.append("\x1b[1m" if bold else "\x1b[0m")
        else:
            out.append(visible(piece[: width - shown]))
            shown += len(piece[: width - shown])
    return "".join(out) + ("\x1b[0m" if bold else "")


def embedder_name(value: str) -> str:
    """--embedder's value, checked before any database is opened or made."""
    kind, colon, model = value.partition(":")
    if (kind in EMBEDDERS and not colon) or (kind in ("openai", "llm") and model.strip()):
        return value
    raise argparse.ArgumentTypeError(
        f"expected {', '.join(EMBEDDERS)}, openai:MODEL or llm:MODEL_ID, not {value!r}"
    )


def add_db_args(p, required: bool = True) -> None:
    """--db and --embedder, which every command that opens an index takes."""
    db = os.environ.get("HYBRIDSQL_DB") or None
    p.add_argument(
        "--db",
        required=required and db is None,
        default=db,
        help="the SQLite database file (default: $HYBRIDSQL_DB)",
    )
    p.add_argument(
        "--embedder",
        type=embedder_name,
        default=None,
        metavar="{auto,local,openai,none,openai:MODEL,llm:MODEL_ID}",
        help="embedding provider (default: $HYBRIDSQL_EMBEDDER or auto); llm:MODEL_ID is an "
        "embedding model of the llm package (pip install 'hybridsql[llm]')",
    )


def add_search_options(p) -> None:
    d = SearchOptions()
    p.add_argument("--mode", choices=MODES, default=d.mode)
    p.add_argument("--vector-weight", dest="vector_weight", type=float, default=d.vector_weight)
    p.add_argument("--keyword-weight", dest="keyword_weight", type=float, default=d.keyword_weight)
    p.add_argument(
        "--min-score",
        dest="min_score",
        type=float,
        default=d.min_score,
        help="drop results whose relevance (before decay) is lower; default %(default)s",
    )
    p.add_argument("--max-results", "-n", dest="max_results", type=int, default=d.max_results)
    p.add_argument(
        "--half-life",
        dest="half_life_days",
        type=float,
        default=d.half_life_days,
        help="days for a dated file's score to halve; default %(default)s",
    )
    p.add_argument(
        "--pool",
        dest="candidate_pool",
        type=int,
        default=d.candidate_pool,
        help="candidates taken from each side; default %(default)s",
    )
    p.add_argument("--fusion", choices=FUSIONS, default=d.fusion)
    p.add_argument(
        "--keyword-terms",
        dest="keyword_terms",
        type=int,
        default=d.keyword_terms,
        help="keep only the N rarest query words for bm25 (faster on long queries);"
        " 0 keeps all, the default",
    )
    p.add_argument(
        "--vector-floor",
        dest="vector_floor",
        type=float,
        default=d.vector_floor,
        help="cosine below which a vector match counts as noise; default %(default)s",
    )
    p.add_argument("--prefix", action="store_true", help="match word prefixes (auth*)")
    p.add_argument("--mmr", action="store_true", help="re-rank for diversity (MMR)")
    p.add_argument("--mmr-lambda", dest="mmr_lambda", type=float, default=d.mmr_lambda)
    p.add_argument("--backend", choices=BACKENDS, default=d.backend)
    p.add_argument(
        "--now",
        default=None,
        help="the time to decay against: unix seconds or an ISO date (2026-11-22);"
        " default: the current time",
    )
    p.add_argument(
        "--no-decay",
        dest="decay",
        action="store_false",
        help="rank dated notes (memory/YYYY-MM-DD.md) by relevance alone, whatever their age",
    )
    p.add_argument(
        "--group-by-file",
        dest="group_by_file",
        action="store_true",
        help="one result per file: its best chunk, with the lines of its other matches",
    )


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the problem and where the usage is (subcommands' parsers
    are of this class too)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="hybridsql", description="Hybrid keyword + vector search inside SQLite.")
    parser.add_argument("--version", action="version", version=f"hybridsql {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "path",
        help="print the path of the loadable SQLite extension",
        description="Print the path of the loadable SQLite extension.",
        epilog='example: sqlite3 mem.db ".load $(hybridsql path)" "select hybrid_score(0.8, -4.2)"',
    )
    p.set_defaults(func=cmd_path)

    p = sub.add_parser(
        "index",
        help="index a folder of markdown memory files",
        description="Index MEMORY.md, memory/**/*.md and any markdown under DIR. Only changed "
        "files are re-chunked and only new chunks embedded.",
        epilog="example: hybridsql index examples/memory --db mem.db",
    )
    p.add_argument("dir")
    add_db_args(p)
    p.add_argument("--json", action="store_true", help="print JSON (the default when piped)")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser(
        "search",
        help="hybrid search of an index",
        description="Search with one SQL statement fusing FTS5 bm25, vectors and temporal decay.",
        epilog='example: hybridsql search "indentation preference" --db mem.db --json',
    )
    p.add_argument("query")
    add_db_args(p)
    p.add_argument("--json", action="store_true", help="print JSON (the default when piped)")
    p.add_argument(
        "--explain",
        action="store_true",
        help="print the SQL statement with its parameters, runnable in sqlite3",
    )
    add_search_options(p)
    p.set_defaults(func=cmd_search)
    add_memory_parsers(sub)
    return parser


# -- agent memories: ``hybridsql memory ...`` and ``hybridsql mcp`` ---------------------------


def print_json(value) -> int:
    print(json.dumps(value, ensure_ascii=False))
    return 0


def cmd_memory(args) -> int:
    from hybridsql.memory import MemoryStore

    # A search that does not reinforce writes nothing, so it opens the file read-only.
    opening = args.opening if getattr(args, "reinforce", True) else "read"
    with open_index(args, opening) as index:
        store = MemoryStore(index, getattr(args, "memory_dir", None))
        return print_json(args.run(store, args))


def memory_search(store, args):
    found = store.search(
        args.query,
        project=args.project,
        sector=args.sector,
        tier=args.tier,
        limit=args.limit,
        min_salience=args.min_salience,
        include_superseded=args.include_superseded,
        session_id=args.session,
        mode=args.mode,
        recalled_in=args.recalled_in,
        reinforce=args.reinforce,
    )
    hits = [h.as_dict() for h in found]
    return {"query": args.query, "mode": found.mode, "notes": found.notes, "results": hits}


def memory_documents(store, args):
    found = store.search_documents(
        args.query, args.project, args.limit, args.decay, args.group_by_file
    )
    return {"query": args.query, "mode": found.mode, "results": [r.as_dict() for r in found]}


def memory_delete(store, args):
    store.delete(args.id, hard=args.hard)
    return {"deleted": args.id, "hard": args.hard}


def memory_relate(store, args):
    store.relate(args.from_id, args.to_id, args.relation, args.by)
    return {"from_id": args.from_id, "to_id": args.to_id, "relation": args.relation}


def memory_context(store, args):
    context = store.session_context(args.id)
    return None if context is None else context.as_dict()


MEMORY_COMMANDS = {
    # name: (help, example, run, opening: see OPENINGS)
    "add": (
        "store a memory",
        'hybridsql memory add "Maya wants 4 spaces in Python" --project tide --sector semantic '
        "--db mem.db",
        lambda store, a: store.add(
            a.content, a.project or "", a.sector, a.tier, a.salience, a.session
        ).as_dict(),
        "create",
    ),
    "search": (
        "search memories (filters apply before ranking)",
        'hybridsql memory search "indentation" --project tide --sector semantic --db mem.db',
        memory_search,
        "write",  # each memory found gains salience and is linked to the session as recalled
        # (read with --no-reinforce)
    ),
    "documents": (
        "search the indexed memory files",
        'hybridsql memory documents "postgres switchover" --project billing --db mem.db',
        memory_documents,
        "read",
    ),
    "get": (
        "print one memory",
        "hybridsql memory get 12 --db mem.db",
        lambda store, a: store.get(a.id).as_dict(),
        "read",
    ),
    "supersede": (
        "replace a memory that became wrong with a new one",
        'hybridsql memory supersede 12 "Maya now wants ruff format defaults" --db mem.db',
        lambda store, a: store.supersede(a.id, a.content, a.session, a.by).as_dict(),
        "write",
    ),
    "reinforce": (
        "raise a memory's salience",
        "hybridsql memory reinforce 12 --amount 0.2 --db mem.db",
        lambda store, a: store.reinforce(a.id, a.amount, a.session).as_dict(),
        "write",
    ),
    "relate": (
        "link two memories",
        "hybridsql memory relate 12 7 --relation RELATED_TO --db mem.db",
        memory_relate,
        "write",
    ),
    "timeline": (
        "the memories of a memory's project around it in time",
        "hybridsql memory timeline 12 --before 3 --after 3 --db mem.db",
        lambda store, a: [e.as_dict() for e in store.timeline(a.id, a.before, a.after)],
        "read",
    ),
    "delete": (
        "forget a memory",
        "hybridsql memory delete 12 --db mem.db",
        memory_delete,
        "write",
    ),
    "extract": (
        "append a note to today's memory/YYYY-MM-DD.md and index it",
        'hybridsql memory extract --topic deploys --title "No Friday deploys" '
        '--content "Maya: staging only on Fridays." --tag process --memory-dir notes --db mem.db',
        lambda store, a: store.extract_memory(a.topic, a.title, a.content, a.tag).as_dict(),
        "create",
    ),
}

SESSION_COMMANDS = {
    "start": (
        "open a session and print it",
        "hybridsql memory session start --project tide --db mem.db",
        lambda store, a: store.start_session(a.project or "").as_dict(),
        "create",
    ),
    "end": (
        "close a session with a summary",
        'hybridsql memory session end 3 --summary "moved CI to uv" --db mem.db',
        lambda store, a: store.end_session(a.id, a.summary).as_dict(),
        "write",
    ),
    "context": (
        "the latest session that used a memory, and how many memories it holds",
        "hybridsql memory session context 12 --db mem.db",
        memory_context,
        "read",
    ),
}


def add_memory_parsers(sub) -> None:
    """The ``memory`` command group and the ``mcp`` command."""
    from hybridsql.memory import SECTORS

    def command(group, name, spec):
        help_, example, run, opening = spec
        p = group.add_parser(
            name,
            help=help_,
            description=help_[0].upper() + help_[1:] + ". Prints JSON.",
            epilog=f"example: {example}",
        )
        add_db_args(p)
        p.set_defaults(func=cmd_memory, run=run, opening=opening)
        return p

    memory = sub.add_parser(
        "memory",
        help="an agent's memories: add, search, supersede, sessions... (JSON output)",
        description="Memories an agent writes as it works, searched with the same one-statement "
        "hybrid search as the memory files. Every command prints JSON.",
        epilog='example: hybridsql memory search "auth" --project tide --db mem.db',
    )
    group = memory.add_subparsers(dest="memory_command", required=True)
    p = {name: command(group, name, spec) for name, spec in MEMORY_COMMANDS.items()}
    session_group = group.add_parser(
        "session",
        help="start and end sessions; the session context of a memory",
        description="Sessions group what an agent did while working; memories link to them.",
        epilog="example: hybridsql memory session start --project tide --db mem.db",
    ).add_subparsers(dest="session_command", required=True)
    s = {name: command(session_group, name, spec) for name, spec in SESSION_COMMANDS.items()}

    p["add"].add_argument("content")
    p["supersede"].add_argument("id", type=int)
    p["supersede"].add_argument("content")
    for name in ("get", "reinforce", "timeline", "delete"):
        p[name].add_argument("id", type=int)
    s["end"].add_argument("id", type=int)
    s["context"].add_argument("id", type=int, help="the memory's id")
    for name in ("search", "documents"):
        p[name].add_argument("query")
        p[name].add_argument("--limit", "-n", type=int, default=10)
    for target in (p["add"], p["search"], p["documents"], s["start"]):
        target.add_argument("--project", default=None)
    p["add"].add_argument("--sector", choices=SECTORS, default="semantic")
    p["add"].add_argument("--tier", default="project")
    p["add"].add_argument("--salience", type=float, default=0.5)
    p["search"].add_argument("--sector", choices=SECTORS, default=None)
    p["search"].add_argument("--tier", default=None)
    for name in ("add", "supersede", "reinforce", "search"):
        p[name].add_argument("--session", type=int, default=None, help="a session id")
    for name in ("supersede", "relate"):
        p[name].add_argument("--by", default="agent", help="who made the link; default agent")
    p["reinforce"].add_argument("--amount", type=float, default=0.1)
    p["search"].add_argument("--min-salience", dest="min_salience", type=float, default=0.0)
    p["search"].add_argument("--include-superseded", dest="include_superseded", action="store_true")
    p["search"].add_argument(
        "--recalled-in",
        dest="recalled_in",
        type=int,
        default=None,
        help="the session to link the results to as recalled (default: --session)",
    )
    p["search"].add_argument("--mode", choices=MODES, default="hybrid")
    p["search"].add_argument(
        "--no-reinforce",
        dest="reinforce",
        action="store_false",
        help="only look: the memories found gain no salience and no link (each search that"
        " reinforces ranks what it found higher next time); opens the file read-only",
    )
    p["documents"].add_argument(
        "--no-decay",
        dest="decay",
        action="store_false",
        help="rank dated notes by relevance alone, whatever their age",
    )
    p["documents"].add_argument(
        "--group-by-file",
        dest="group_by_file",
        action="store_true",
        help="one result per file: its best chunk, with the lines of its other matches",
    )
    p["relate"].add_argument("from_id", type=int)
    p["relate"].add_argument("to_id", type=int)
    p["relate"].add_argument("--relation", default="RELATED_TO")
    for name in ("before", "after"):
        p["timeline"].add_argument(f"--{name}", type=int, default=5)
    p["delete"].add_argument(
        "--hard", action="store_true", help="remove it from the database, not only mark it"
    )
    p["extract"].add_argument("--topic", required=True)
    p["extract"].add_argument("--title", required=True)
    p["extract"].add_argument("--content", required=True)
    p["extract"].add_argument("--tag", action="append", default=[], help="repeat for more tags")
    p["extract"].add_argument("--memory-dir", dest="memory_dir", required=True)
    s["end"].add_argument("--summary", default="")

    p = sub.add_parser(
        "mcp",
        help="serve the memory store over MCP (stdio, or HTTP with --http)",
        description="An MCP server on stdin/stdout with the tools search_memory, extract_memory, "
        "add, supersede, reinforce, timeline, recent_memories and delete. It answers at once "
        "and indexes the memory folder in the background. The process is one session. Needs "
        "the mcp extra: pip install 'hybridsql[mcp]'. With --http it serves many clients over "
        "HTTP instead, each MCP session a hybridsql session.",
        epilog="examples: hybridsql mcp --db mem.db --memory-dir ~/agent-memory --project tide; "
        "HYBRIDSQL_TOKEN=... hybridsql mcp --http 0.0.0.0:8765 --data-dir ~/agent-memory/db",
    )
    add_db_args(p, required=False)
    p.add_argument(
        "--memory-dir",
        dest="memory_dir",
        default=None,
        help="the memory folder: indexed in the background from the start, where "
        "extract_memory writes",
    )
    p.add_argument("--project", default="", help="the project of the session and of new memories")
    p.add_argument(
        "--http",
        metavar="HOST:PORT",
        default=None,
        help="serve many clients over MCP's streamable HTTP at http://HOST:PORT/mcp "
        "(/mcp/PROJECT names a project) instead of stdio",
    )
    p.add_argument(
        "--data-dir",
        dest="data_dir",
        metavar="DIR",
        default=None,
        help="with --http, instead of --db: one index per project, DIR/PROJECT.db, made by "
        "its first write",
    )
    p.add_argument(
        "--token",
        default=None,
        help="with --http: the bearer token every request must carry (default: "
        "$HYBRIDSQL_TOKEN, which ps does not show); needed on a non-loopback address",
    )
    p.set_defaults(func=cmd_mcp)


def cmd_mcp(args) -> int:
    try:
        from hybridsql.mcp_server import serve
    except ImportError as e:
        raise HybridSQLError(
            f"the MCP server needs the mcp extra: pip install 'hybridsql[mcp]' ({e})"
        ) from e
    if args.http is not None:
        from hybridsql.mcp_http import serve_http

        from_env = args.db == os.environ.get("HYBRIDSQL_DB")  # gives way to --data-dir
        db = None if args.data_dir and from_env else args.db
        token = args.token or os.environ.get("HYBRIDSQL_TOKEN") or None
        serve_http(
            args.http, db, args.data_dir, args.memory_dir, args.project, args.embedder, token
        )
    elif args.data_dir is not None or args.token is not None:
        raise HybridSQLError("--data-dir and --token serve over HTTP: add --http HOST:PORT")
    elif args.db is None:
        raise HybridSQLError("the MCP server over stdio needs --db FILE (or $HYBRIDSQL_DB)")
    else:
        serve(args.db, args.memory_dir, args.project, args.embedder)
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, so that a closed pipe is seen here and not at exit
        return code
    except HybridSQLError as e:
        return fail(e)
    except apsw.Error as e:
        problem = file_error(e, args.db) if hasattr(args, "db") else None
        if problem is None:
            raise
        return fail(problem)
    except KeyboardInterrupt:
        # Ctrl-C: what was committed stays (an index run keeps the files it wrote).
        print("hybridsql: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): say nothing more, as a command killed by SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13


def fail(error: Exception) -> int:
    print(f"hybridsql: {error}", file=sys.stderr)
    return 1
