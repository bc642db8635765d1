"""What an index file holds: its bytes by table, against the text it indexes.

Each b-tree is counted under the table it serves: an index under its table, a shadow table
(``chunks_fts_data``, ``vectors_blocks``) under its virtual table. The bytes come from SQLite's
``dbstat`` virtual table (pages of each b-tree, overflow pages included); a SQLite built without
it gives rows only, and the file's total. The text is what was indexed: the bytes of the files
and of the memories' contents, so the ratio is the file's cost per byte of notes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import apsw

FREE = "(freelist)"  # pages SQLite freed, reused before the file grows


def file_stats(path: str) -> dict:
    """The breakdown of the index in ``path``, opened read-only (any schema version)."""
    import apsw

    from hybridsql.db.extension import connect, file_error
    from hybridsql.db.schema import schema_version
    from hybridsql.errors import DatabaseError

    conn = connect(path, readonly=True, create=False)
    try:
        if schema_version(conn) is None:
            raise DatabaseError(f"{path} is not a hybridsql index")
        return breakdown(conn)
    except apsw.Error as e:  # a damaged vector_index table, met counting its rows
        problem = file_error(e, path, writing=False)
        if problem is None:
            raise
        raise problem from e
    finally:
        conn.close()


def has_dbstat(conn: apsw.Connection) -> bool:
    """Whether this SQLite has the dbstat virtual table."""
    found = "select count(*) from pragma_module_list where name = 'dbstat'"
    return bool(conn.execute(found).fetchone()[0])


def breakdown(conn: apsw.Connection, dbstat: bool | None = None) -> dict:
    """The file's bytes, its text's bytes, their ratio and, table by table (largest first),
    bytes, share of the file and rows. ``dbstat`` None: use it where this SQLite has it.

    Rows are counted for ordinary tables and vector_index tables; a full-text table's rows are
    those of its docsize table when it keeps one, else None."""
    page_size = conn.execute("pragma page_size").fetchone()[0]
    file_bytes = page_size * conn.execute("pragma page_count").fetchone()[0]
    schema = conn.execute("select type, name, tbl_name, sql from sqlite_schema").fetchall()
    virtual = {name for kind, name, _, sql in schema if kind == "table" and _is_virtual(sql)}
    tables: dict = {}
    for kind, name, _, _ in schema:
        if kind == "table" and _owner(name, virtual) == name:
            tables[name] = {"name": name, "bytes": None, "share": None, "rows": None}
    tables["sqlite_schema"] = {"name": "sqlite_schema", "bytes": None, "share": None, "rows": None}
    for name, entry in tables.items():
        entry["rows"] = _rows(conn, name, schema, virtual)
    if dbstat is None:
        dbstat = has_dbstat(conn)
    if dbstat:
        index_of = {name: table for kind, name, table, _ in schema if kind == "index"}
        for name, pages in conn.execute("select name, sum(pgsize) from dbstat group by name"):
            owner = _owner(index_of.get(name, name), virtual)
            entry = tables.setdefault(
                owner, {"name": owner, "bytes": None, "share": None, "rows": None}
            )
            entry["bytes"] = (entry["bytes"] or 0) + pages
        used = sum(t["bytes"] or 0 for t in tables.values())
        tables[FREE] = {"name": FREE, "bytes": file_bytes - used, "share": None, "rows": None}
        for entry in tables.values():
            entry["bytes"] = entry["bytes"] or 0
            entry["share"] = round(entry["bytes"] / file_bytes, 4) if file_bytes else 0.0
    text = _text_bytes(conn, {name for kind, name, _, _ in schema if kind == "table"})
    ordered = sorted(tables.values(), key=lambda t: (-(t["bytes"] or 0), t["name"]))
    return {
        "file_bytes": file_bytes,
        "page_size": page_size,
        "text_bytes": text,
        "ratio": round(file_bytes / text, 2) if text else None,
        "dbstat": dbstat,
        "tables": ordered,
    }


def _is_virtual(sql: str | None) -> bool:
    return bool(sql) and sql.lstrip().lower().startswith("create virtual table")


def _owner(name: str, virtual: set) -> str:
    """The virtual table whose shadow table ``name`` is (the longest name that prefixes it
    with an underscore), else ``name`` itself."""
    owners = [v for v in virtual if name.startswith(v + "_")]
    return max(owners, key=len) if owners else name


def _rows(conn: apsw.Connection, name: str, schema: list, virtual: set):
    import apsw

    sql = next((s for kind, n, _, s in schema if kind == "table" and n == name), None)
    counted = name
    if name == "sqlite_schema":
        return len(schema)
    if name in virtual and "using fts5" in sql.lower():
        counted = f"{name}_docsize"
        if counted not in {n for _, n, _, _ in schema}:
            return None
    table = '"' + counted.replace('"', '""') + '"'
    try:
        return conn.execute(f"select count(*) from {table}").fetchone()[0]
    except apsw.SQLError:  # a module this connection has not loaded
        return None


def _text_bytes(conn: apsw.Connection, tables: set) -> int:
    """The bytes of the files indexed and of the memories' contents."""
    total = 0
    if "files" in tables:
        total += conn.execute("select coalesce(sum(size), 0) from files").fetchone()[0]
    if "chunks" in tables:
        memories = "select coalesce(sum(length(cast(text as blob))), 0) from chunks where kind = ?"
        total += conn.execute(memories, ("memory",)).fetchone()[0]
    return total


def lines(stats: dict) -> list:
    """The breakdown for a person: a head line, then one line per table."""
    ratio = f"{stats['ratio']:.2f} x the text" if stats["ratio"] is not None else "no text"
    head = (
        f"{stats['file_bytes']:,} bytes in {stats['page_size']:,}-byte pages, text"
        f" {stats['text_bytes']:,} bytes: {ratio}"
    )
    out = [head, f"{'table':<24} {'bytes':>14} {'share':>7} {'rows':>10}"]
    for t in stats["tables"]:
        size = f"{t['bytes']:,}" if t["bytes"] is not None else "-"
        share = f"{100 * t['share']:.1f} %" if t["share"] is not None else "-"
        rows = f"{t['rows']:,}" if t["rows"] is not None else "-"
        out.append(f"{t['name']:<24} {size:>14} {share:>7} {rows:>10}")
    if not stats["dbstat"]:
        out.append("bytes by table need SQLite's dbstat virtual table, which this SQLite lacks")
    return out
