"""The Datasette plugin: every hybridsql function, and embed(), in every Datasette query, and a
search page per database at /DATABASE/-/hybridsql that searches as `hybridsql search` does,
read-only. Each Datasette query's time limit interrupts its connection when it passes.

An index is searched, and embed() in its queries run, with the model that made its vectors (the
one it records); the plugin's config may name another for a database or for all of them, as
``--model`` does (metadata.yml: ``plugins: {hybridsql: {model: multilingual-e5-small}}``)."""

import asyncio
import contextlib
import functools
import importlib.resources
import threading
import time

import apsw
import datasette.database
from datasette import hookimpl
from datasette.utils import tilde_decode
from datasette.utils.asgi import Response
from markupsafe import Markup, escape

from hybridsql.db.extension import load
from hybridsql.embedding.embedder import default_embedder, register_embed, resolve_provider
from hybridsql.embedding.engine import local_by_default
from hybridsql.embedding.models import prepare_sql_embed
from hybridsql.errors import HybridSQLError
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import SECTORS, MemoryStore
from hybridsql.search import MODES, SearchOptions, explain_sql

KINDS = ("documents", "memories")
# SQLite's schema tables: what every statement's preparation and the lookup of embed()'s model
# read. Datasette reads them for every page of a database, under view-database alone.
SCHEMA_TABLES = {"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"}


class Deadline:
    """A Datasette query's time limit, kept by a timer that interrupts its connection."""

    def __init__(self, conn, seconds: float):
        self.conn = conn
        self.passed = False
        self.running = True
        self.lock = threading.Lock()
        self.timer = threading.Timer(seconds, self.interrupt)
        self.timer.daemon = True

    def interrupt(self) -> None:
        with self.lock:
            if self.running:  # not once the query is over: the next one would be interrupted
                self.passed = True
                self.conn.interrupt()

    def finish(self) -> None:
        with self.lock:
            self.running = False
        self.timer.cancel()


_query = threading.local()  # .deadline: the Deadline of the query this thread runs, if any


def _interrupted() -> bool:
    """Whether the query this thread runs has passed its time limit (embed() asks)."""
    deadline = getattr(_query, "deadline", None)
    return deadline is not None and deadline.passed


_datasette_time_limit = datasette.database.sqlite_timelimit


@contextlib.contextmanager
def _time_limit(conn, ms):
    """Datasette's time limit, kept also where its progress handler cannot: Datasette checks the
    time every 1,000 SQLite steps, and a statement that spends seconds inside a function (an
    embed() of a long text) takes few. At the limit the connection is interrupted: SQLite stops
    at its next step, and embed() before its next window."""
    with _datasette_time_limit(conn, ms):
        deadline, outer = Deadline(conn, ms / 1000), getattr(_query, "deadline", None)
        _query.deadline = deadline
        deadline.timer.start()
        try:
            yield
        finally:
            deadline.finish()
            _query.deadline = outer


# Datasette runs every query it times inside sqlite_timelimit (datasette/database.py), the one
# place where a query's connection and its limit meet.
datasette.database.sqlite_timelimit = _time_limit


def _model(datasette, database) -> str | None:
    """The model the plugin's config names for ``database`` (its own, else the plugin's)."""
    config = datasette.plugin_config("hybridsql", database=database) or {}
    model = config.get("model")
    return model if isinstance(model, str) and model else None


@hookimpl
def prepare_connection(conn, database, datasette):
    # As the sqlite-utils plugin: the extension's embed() for the local model (it stops between
    # windows when the time limit interrupts the connection), else Python's, which asks
    # _interrupted. Either model loads on the first embed() call, inside that query's limit.
    if load(conn) == "extension" and local_by_default():
        model = _model(datasette, database)
        if model is None:
            prepare_sql_embed(conn)  # the index's own model, or the default
        else:
            _name_model(conn, model)
    else:
        register_embed(conn, default_embedder, interrupted=_interrupted)


def _name_model(conn, model: str) -> None:
    """Makes embed() on ``conn`` run the model the config names (hybridsql_model()), its file
    written first where it can be; where it cannot be found, embed() says so when called."""
    from hybridsql.embedding.models import ensure, resolve

    with contextlib.suppress(Exception):  # a connection must open whatever the model's state
        conn.execute("select hybridsql_model(?)", (str(ensure(resolve(model))),)).fetchall()


@hookimpl
def register_routes():
    return [(r"^/(?P<database>[^/]+)/-/hybridsql$", search_page)]


@hookimpl
def database_actions(datasette, database):
    return [{"href": datasette.urls.database(database) + "/-/hybridsql", "label": "Hybrid search"}]


@functools.cache
def _provider():
    """One embedding model per process, loaded by the first search ($HYBRIDSQL_EMBEDDER)."""
    return resolve_provider(None)


@functools.cache
def _template(datasette):
    text = (importlib.resources.files("hybridsql") / "templates" / "hybridsql.html").read_text()
    return datasette.jinja_env.from_string(text)


def _form(args) -> dict:
    """The page's fields, from its query string."""
    form = {
        "q": args.get("q", "").strip(),
        "kind": args.get("kind", "documents"),
        "mode": args.get("mode", "hybrid"),
        "project": args.get("project", "").strip(),
        "sector": args.get("sector", ""),
        "superseded": bool(args.get("superseded")),
        "now": args.get("now", "").strip(),
    }
    if form["kind"] not in KINDS:
        form["kind"] = "documents"
    return form


def _search(path: str, form: dict, tables: set, model: str | None = None):
    """The results of the form's search, on a read-only index: nothing is written, not even
    the reinforcement a memory search gives by default. Adds to ``tables`` every table whose
    view-table permission covers what the search read (see ``_covering``), for the page to
    check."""
    read: set = set()

    def reading(op, table, _column, database, _trigger):
        if op == apsw.SQLITE_READ and database == "main":
            read.add(table)
        return apsw.SQLITE_OK

    options = SearchOptions(mode=form["mode"], now=form["now"] or None)
    # The local provider: the index's own model (or the config's), read once a process; another
    # provider is made once.
    embedder = None if local_by_default() else _provider()
    with HybridIndex(path, embedder=embedder, model=model, readonly=True) as idx:
        idx.conn.authorizer = reading
        try:
            if form["kind"] == "documents":
                return idx.searcher.search(form["q"], options)
            store = MemoryStore(idx, clock=(lambda: options.now) if options.now else time.time)
            return store.search(
                form["q"],
                project=form["project"] or None,
                sector=form["sector"] or None,
                include_superseded=form["superseded"],
                mode=form["mode"],
                reinforce=False,
            )
        finally:
            idx.conn.authorizer = None
            tables |= _covering(idx.conn, read)


def _covering(conn, read: set) -> set:
    """The tables whose view-table permission covers the tables a search ``read``, as
    Datasette's own pages are covered: SQLite's schema tables by none (the database's
    view-database, checked before; embed() reads them to find a database's model), a virtual
    table's shadow tables (chunks_fts_idx, vectors_blocks) by that virtual table (its page reads
    them, and Datasette checks it alone), any other table by itself."""
    kinds = {name: kind for _, name, kind, *_ in conn.execute("pragma main.table_list")}
    virtual = [name for name, kind in kinds.items() if kind == "virtual"]
    covering = set()
    for table in read - SCHEMA_TABLES:
        owners = [v for v in virtual if table.startswith(v + "_")]
        shadow = kinds.get(table) == "shadow" and owners
        covering.add(max(owners, key=len) if shadow else table)
    return covering


def _marked(snippet: str) -> Markup:
    """The snippet escaped as HTML, but for the <mark> tags that hybridsql put around terms."""
    html = str(escape(snippet))
    return Markup(html.replace("&lt;mark&gt;", "<mark>").replace("&lt;/mark&gt;", "</mark>"))


async def search_page(datasette, request):
    """The search page. Datasette's permissions hold as on its own pages: the database's
    (``view-database``, then ``view-instance``) before anything is read, and every table the
    search read (``view-table`` first; a shadow table's virtual table, SQLite's schema tables
    none) before anything is shown; else 403. The URL names the
    database as Datasette's own links do: its route, tilde-encoded (``team~2Enotes``)."""
    route = tilde_decode(request.url_vars["database"])
    try:
        db = datasette.get_database(route=route)
    except KeyError:
        return Response.html(f"no database called {escape(route)}", status=404)
    database = db.name
    await datasette.ensure_permissions(
        request.actor, [("view-database", database), "view-instance"]
    )
    form = _form(request.args)
    found, error, tables = None, None, set()
    if form["q"] and db.path:
        try:
            model = _model(datasette, database)
            found = await asyncio.to_thread(_search, db.path, form, tables, model)
        except (HybridSQLError, ValueError) as e:
            error = str(e)
        for table in sorted(tables):
            await datasette.ensure_permissions(
                request.actor,
                [("view-table", (database, table)), ("view-database", database), "view-instance"],
            )
    elif form["q"]:
        error = f"{database} is not a file: a hybridsql index is"
    context = {
        "database": database,
        "form": form,
        "modes": MODES,
        "kinds": KINDS,
        "sectors": SECTORS,
        "found": found,
        "error": error,
        "marked": _marked,
        "explain": explain_sql(found.sql, found.params, found.embedded) if found else "",
        "rows": datasette.urls.table(database, "chunks"),
        "memories": datasette.urls.table(database, "memories"),
    }
    html = await datasette.render_template(_template(datasette), context, request=request)
    return Response.html(html)
