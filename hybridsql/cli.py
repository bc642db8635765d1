"""The ``hybridsql`` command: index a memory folder, search it, and find the SQL extension."""

import argparse
import json
import sys
from dataclasses import asdict, fields

from hybridsql.errors import HybridSQLError
from hybridsql.extension import loadable_path
from hybridsql.search import BACKENDS, FUSIONS, MODES, SearchOptions, explain_sql

EMBEDDERS = ("auto", "local", "openai", "none")


def cmd_path(args) -> int:
    print(loadable_path())
    return 0


def open_index(args):
    from hybridsql.index import HybridIndex

    return HybridIndex(args.db, embedder=args.embedder)


def cmd_index(args) -> int:
    with open_index(args) as idx:
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
        print(f"skipped {path}: {reason}")
    for path, warning in report.warnings:
        print(f"warning {path}: {warning}")
    return 0


def cmd_search(args) -> int:
    opts = SearchOptions(
        **{f.name: getattr(args, f.name) for f in fields(SearchOptions) if hasattr(args, f.name)}
    )
    with open_index(args) as idx:
        found = idx.searcher.search(args.query, opts)
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
        print(f"note: {note}")
    if not found.results:
        print("no results")
    for r in found:
        where = (
            f"{r.path}:{r.start_line}-{r.end_line}" if r.kind == "document" else f"memory {r.id}"
        )
        vector = "-" if r.vector_score is None else f"{r.vector_score:.3f}"
        keyword = "-" if r.keyword_score is None else f"{r.keyword_score:.3f}"
        print(
            f"{r.score:.3f}  {where}  [{r.match_type}: vector {vector}, keyword {keyword}, "
            f"decay {r.decay:.2f}]"
        )
        print("       " + r.snippet.replace("\n", " ")[:200])
    return 0


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
    p.add_argument("--now", type=float, default=None, help="unix seconds to decay against")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hybridsql", description="Hybrid keyword + vector search inside SQLite."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "path",
        help="print the path of the loadable SQLite extension",
        description="Print the path of the loadable SQLite extension.",
        epilog='example: sqlite3 mem.db ".load $(hybridsql path)" "select hybrid_score(0.8, -4.2)"',
    )
    p.set_defaults(func=cmd_path)

    def with_db(p):
        p.add_argument("--db", required=True, help="the SQLite database file")
        p.add_argument(
            "--embedder",
            choices=EMBEDDERS,
            default=None,
            help="embedding provider (default: $HYBRIDSQL_EMBEDDER or auto)",
        )
        p.add_argument("--json", action="store_true", help="print JSON (the default when piped)")

    p = sub.add_parser(
        "index",
        help="index a folder of markdown memory files",
        description="Index MEMORY.md, memory/**/*.md and any markdown under DIR. Only changed "
        "files are re-chunked and only new chunks embedded.",
        epilog="example: hybridsql index examples/memory --db mem.db",
    )
    p.add_argument("dir")
    with_db(p)
    p.set_defaults(func=cmd_index)

    p = sub.add_parser(
        "search",
        help="hybrid search of an index",
        description="Search with one SQL statement fusing FTS5 bm25, vectors and temporal decay.",
        epilog='example: hybridsql search "indentation preference" --db mem.db --json',
    )
    p.add_argument("query")
    with_db(p)
    p.add_argument(
        "--explain",
        action="store_true",
        help="print the SQL statement with its parameters, runnable in sqlite3",
    )
    add_search_options(p)
    p.set_defaults(func=cmd_search)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HybridSQLError as e:
        print(f"hybridsql: {e}", file=sys.stderr)
        return 1
