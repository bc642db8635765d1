"""The database schema: one table of chunks, its two FTS5 indexes, and its vectors.

Memory files and an agent's memories are both rows of ``chunks`` (``kind`` tells which), so one
search statement serves both. Triggers keep the FTS5 tables in step with ``chunks`` and cascade
deletes (files to chunks to vectors). ``vectors`` is a ``vector_index`` table of the extension
(csrc/vector_index/, Requirement 10), partitioned by model and kind: it owns its storage, and keeps
what any connection caches of it correct by itself.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from hybridsql.errors import DatabaseError, ExtensionError, IndexingError

if TYPE_CHECKING:
    import apsw

SCHEMA_VERSION = 7
# The oldest schema a read-only open can search (what later ones changed, it does without).
SEARCHABLE_FROM = 5

TABLES = """
create table if not exists meta(key text primary key, value) without rowid;
insert or ignore into meta values ('schema_version', 7);

create table if not exists files(
  id integer primary key,
  root text not null,           -- the folder that was indexed, absolute
  path text not null,           -- relative to root, '/'-separated
  sha256 text not null,
  size integer not null,
  mtime real not null,
  unique (root, path)
);

create table if not exists chunks(
  id integer primary key,
  kind text not null default 'document',   -- 'document' or 'memory'
  file_id integer,              -- files(id); NULL for memories
  path text not null,           -- what temporal_decay() reads; '' for memories
  start_line integer not null default 0,
  end_line integer not null default 0,
  heading text not null default '',
  text text not null,
  created_at real not null      -- unix seconds
);
create index if not exists chunks_file on chunks(file_id);
create index if not exists chunks_kind on chunks(kind);
-- Each chunk's text by its length and last characters: a text's vector is looked up in the
-- index before it is embedded (embed.py, Embedder), so the cache keeps no second copy of a
-- vector the index holds; the text itself is compared after. A table kept by triggers rather
-- than an index on those expressions, which `sqlite-utils transform` refuses to carry over.
-- A collection's documents (documents.py, root 'collection:NAME') have no keys: the caller's
-- embeddings make their vectors, not the Embedder, and their keys went in at random places of
-- this B-tree, most of its leaf pages written again (to the -wal file, then the database) by
-- every batch of documents.
create table if not exists chunk_keys(
  length integer not null, tail text not null, chunk_id integer not null,
  primary key (length, tail, chunk_id)
) without rowid;
create trigger if not exists chunk_keys_insert after insert on chunks begin
  insert into chunk_keys select length(new.text), substr(new.text, -24), new.id
    where not exists (select 1 from files where id = new.file_id and root glob 'collection:*');
end;
create trigger if not exists chunk_keys_delete after delete on chunks begin
  delete from chunk_keys
  where length = length(old.text) and tail = substr(old.text, -24) and chunk_id = old.id;
end;
create trigger if not exists chunk_keys_update after update of id, text on chunks begin
  delete from chunk_keys
  where length = length(old.text) and tail = substr(old.text, -24) and chunk_id = old.id;
  insert into chunk_keys select length(new.text), substr(new.text, -24), new.id
    where not exists (select 1 from files where id = new.file_id and root glob 'collection:*');
end;

-- One vector per chunk (chunk_id is the rowid), float32, tagged with its model; kind is the
-- chunk's, so that a search of documents or of memories reads only their blocks.
create virtual table if not exists vectors using vector_index(
  chunk_id integer primary key, vector float[], model_id text partition key,
  kind text partition key
);

-- The model that made the index's vectors, one row, which every search and SQL embed() on the
-- index use without being told (csrc/model/embedsql.c, Requirement 17): model_id tags its vectors
-- (vectors.model_id) and, for hybridsql's own engine (provider 'local'), names its file
-- <model_id>.hsmodel; provider is 'local', 'openai', 'llm' or 'other'; name is what it was
-- chosen by (--model); fingerprint, what changes its vectors ('' where unknown). An ordinary
-- rowid table: the shape embed() reads, running nothing of the database's.
create table if not exists index_model(
  model_id text not null, provider text not null, name text not null, dims integer not null,
  fingerprint text not null
);

-- Deletes cascade by trigger, so they hold whatever a client's foreign_keys setting is.
create trigger if not exists files_delete after delete on files begin
  delete from chunks where file_id = old.id;
end;
create trigger if not exists chunks_delete after delete on chunks begin
  delete from vectors where chunk_id = old.id;
end;

-- An agent's memories: the content is a chunks row (kind 'memory'), the rest is here.
create table if not exists memories(
  chunk_id integer primary key, -- chunks(id), which is also the memory's id
  project text not null default '',
  sector text not null
    check (sector in ('episodic', 'semantic', 'procedural', 'emotional', 'reflective')),
  tier text not null default 'project',  -- e.g. 'session', 'project', 'global'
  salience real not null default 0.5 check (salience between 0 and 1),
  created_at real not null,     -- unix seconds, the same as chunks.created_at
  valid_until real,             -- set when superseded
  deleted integer not null default 0
);
create index if not exists memories_project on memories(project, created_at);

create table if not exists sessions(
  id integer primary key,
  project text not null default '',
  started_at real not null,
  ended_at real,
  summary text not null default ''
);

-- What a session did with a memory; one row per use.
create table if not exists session_memories(
  session_id integer not null,  -- sessions(id)
  memory_id integer not null,   -- memories(chunk_id)
  usage text not null check (usage in ('created', 'recalled', 'updated', 'reinforced')),
  at real not null
);
create index if not exists session_memories_memory on session_memories(memory_id, at);
create index if not exists session_memories_session on session_memories(session_id, memory_id);
-- A memory's recalls, one per session at its latest: what ranks it (memory/ranking.py), read
-- for every candidate of every search, from this index alone (made at an index's next open).
create index if not exists session_memories_recalls
  on session_memories(memory_id, usage, session_id, at);

create table if not exists memory_links(
  from_id integer not null,     -- memories(chunk_id)
  to_id integer not null,       -- memories(chunk_id)
  relation text not null,       -- e.g. 'RELATED_TO', 'SUPERSEDES' (from_id supersedes to_id)
  created_by text not null default '',
  created_at real not null,
  primary key (from_id, to_id, relation)
) without rowid;
create index if not exists memory_links_to on memory_links(to_id);

create trigger if not exists memories_delete after delete on chunks when old.kind = 'memory'
begin
  delete from memories where chunk_id = old.id;
  delete from session_memories where memory_id = old.id;
  delete from memory_links where from_id = old.id or to_id = old.id;
end;
"""

# The scripts of the trigram tables, as the ranges of a character class, the same in a Python
# regular expression and in SQLite's GLOB (which compares a range's ends by code point): CJK (Han,
# kana, Hangul, CJK punctuation, fullwidth forms), and Thai, Lao, Myanmar and Khmer, written
# without spaces between words, which unicode61 would take a whole phrase at a time as one
# token. A query with letters of them goes to the trigram tables (search/keywords.py,
# keyword_plan), which hold only the chunks that have one of these characters. Schema 5's
# class was CJK alone (its views: document_cjk_chunks, memory_cjk_chunks).
TRIGRAM_SCRIPTS = (
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff"
    "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\u3000-\u303f"
)


def _has_script(text: str) -> str:
    """The SQL test of whether the column ``text`` holds a character of TRIGRAM_SCRIPTS, with
    built-in functions only (any client may write chunks). The GLOB decodes and tests each
    character against the class; it ran longer than FTS5's tokenizer on English text. So text
    whose length in characters is its length in bytes is answered first, without it: every
    character of such text was read from one byte (ASCII, or a byte that starts no sequence),
    so none is in the class (all of it past U+07FF), and there is no NUL before its end
    (length() stops at one, as GLOB does). Any other text gets the GLOB, as before: the answer
    is the same for every value, malformed UTF-8 included."""
    one_byte_each = f"length(cast({text} as text)) = length(cast({text} as blob))"
    return f"(not {one_byte_each} and {text} glob '*[{TRIGRAM_SCRIPTS}]*')"


# Full-text indexes, one pair for each kind of chunk, so that a search of documents or of memories
# reads only that kind's words, and scores them with that kind's statistics. Each is an
# external-content FTS5 table over a view of its kind's chunks, except chunks_fts: its content is
# the table chunks itself, written `content="chunks"`, the form by which sqlite-utils and Datasette
# find a table's full-text index (`sqlite-utils search mem.db chunks deploy`, Datasette's search
# box on chunks). It still holds only the documents' words, the triggers writing no others; but
# FTS5's 'rebuild' would add the memories, and its 'integrity-check' with rank 1 counts them as
# missing, so _fill_fts fills it, and it is checked with rank 0.
#
# The trigram tables serve queries with letters of TRIGRAM_SCRIPTS only, whose trigrams match
# only chunks with such text, so they hold only those chunks: their views, and the triggers, test
# the text with the same GLOB (an FTS5 'delete' of a row never indexed would corrupt the index).
# On a corpus of English notes they were a third of the file.
FTS = f"""
create view if not exists memory_chunks as select id, text from chunks where kind = 'memory';
create view if not exists document_trigram_chunks as
  select id, text from chunks where kind = 'document' and {_has_script("text")};
create view if not exists memory_trigram_chunks as
  select id, text from chunks where kind = 'memory' and {_has_script("text")};
create virtual table if not exists chunks_fts using fts5(
  text, content="chunks", content_rowid="id", tokenize='porter unicode61 remove_diacritics 2'
);
create virtual table if not exists chunks_trigram using fts5(
  text, content='document_trigram_chunks', content_rowid='id', tokenize='trigram'
);
create virtual table if not exists memories_fts using fts5(
  text, content='memory_chunks', content_rowid='id',
  tokenize='porter unicode61 remove_diacritics 2'
);
create virtual table if not exists memories_trigram using fts5(
  text, content='memory_trigram_chunks', content_rowid='id', tokenize='trigram'
);
create trigger if not exists chunks_fts_insert after insert on chunks begin
  insert into chunks_fts(rowid, text) select new.id, new.text where new.kind = 'document';
  insert into chunks_trigram(rowid, text)
    select new.id, new.text where new.kind = 'document' and {_has_script("new.text")};
  insert into memories_fts(rowid, text) select new.id, new.text where new.kind = 'memory';
  insert into memories_trigram(rowid, text)
    select new.id, new.text where new.kind = 'memory' and {_has_script("new.text")};
end;
create trigger if not exists chunks_fts_delete after delete on chunks begin
  insert into chunks_fts(chunks_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document';
  insert into chunks_trigram(chunks_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document' and {_has_script("old.text")};
  insert into memories_fts(memories_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory';
  insert into memories_trigram(memories_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory' and {_has_script("old.text")};
end;
create trigger if not exists chunks_fts_update after update of text, kind on chunks begin
  insert into chunks_fts(chunks_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document';
  insert into chunks_trigram(chunks_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document' and {_has_script("old.text")};
  insert into memories_fts(memories_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory';
  insert into memories_trigram(memories_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory' and {_has_script("old.text")};
  insert into chunks_fts(rowid, text) select new.id, new.text where new.kind = 'document';
  insert into chunks_trigram(rowid, text)
    select new.id, new.text where new.kind = 'document' and {_has_script("new.text")};
  insert into memories_fts(rowid, text) select new.id, new.text where new.kind = 'memory';
  insert into memories_trigram(rowid, text)
    select new.id, new.text where new.kind = 'memory' and {_has_script("new.text")};
end;
"""

# The full-text tables of each kind of chunk: (porter words, trigrams).
FTS_TABLES = {
    "document": ("chunks_fts", "chunks_trigram"),
    "memory": ("memories_fts", "memories_trigram"),
}

# The columns that searches and writes name, table by table. Every open checks that they are
# there: a table rebuilt by another tool (`sqlite-utils transform --rename`) may have lost one.
COLUMNS = {
    "meta": ("key", "value"),
    "files": ("id", "root", "path", "sha256", "size", "mtime"),
    "chunks": (
        "id",
        "kind",
        "file_id",
        "path",
        "start_line",
        "end_line",
        "heading",
        "text",
        "created_at",
    ),
    "memories": (
        "chunk_id",
        "project",
        "sector",
        "tier",
        "salience",
        "created_at",
        "valid_until",
        "deleted",
    ),
    "sessions": ("id", "project", "started_at", "ended_at", "summary"),
    "session_memories": ("session_id", "memory_id", "usage", "at"),
    "memory_links": ("from_id", "to_id", "relation", "created_by", "created_at"),
    "index_model": ("model_id", "provider", "name", "dims", "fingerprint"),
}


def _parts(script: str) -> tuple:
    """The names of the tables, views and triggers that ``script`` makes."""
    return tuple(
        re.findall(r"create (?:virtual )?(?:table|view|trigger) if not exists (\w+)", script)
    )


# What a whole index holds besides indexes (which only make it faster): the tables and the
# triggers that keep vectors and the keyword index in step with chunks, and, where the index
# has full-text search, its tables, views and triggers.
PARTS = _parts(TABLES)
FTS_PARTS = _parts(FTS)


# The parts a schema version added since SEARCHABLE_FROM: an older index searched read-only
# does without them (its upgrade makes them).
_ADDED = {"index_model": 7}

# Schema 5's names of the views that are named otherwise now (SEARCHABLE_FROM).
_SCHEMA_5_NAMES = {
    "document_trigram_chunks": "document_cjk_chunks",
    "memory_trigram_chunks": "memory_cjk_chunks",
}


def _triggers(script: str) -> dict:
    """The triggers that ``script`` makes, by name, each as sqlite_schema keeps its text."""
    made = re.finditer(r"create trigger if not exists (\w+)(.*?\bend);", script, re.S)
    return {m[1]: f"CREATE TRIGGER {m[1]}{m[2]}" for m in made}


# This version's triggers. An index of this schema version whose trigger reads otherwise (one
# that an earlier release wrote) has it made again as this one writes it, at a writing open: a
# trigger may change here only where the rows it keeps stay right under either text (the same
# answers, only faster); a change that needs its rows made again needs a new schema version.
TRIGGERS = {**_triggers(TABLES), **_triggers(FTS)}


def _drop_stale_triggers(conn: apsw.Connection) -> None:
    """Drops the triggers of this index whose text is not this version's (TRIGGERS): TABLES and
    FTS make them again."""
    for name, sql in conn.execute("select name, sql from sqlite_schema where type = 'trigger'"):
        if name in TRIGGERS and sql != TRIGGERS[name]:
            conn.execute(f"drop trigger {name}")


def without_native(detail: str) -> IndexingError:
    """The error of a write that needs vector_index on a connection without it, saying why the
    native extension is missing where that is known (``detail``: SQLite's error)."""
    try:
        from hybridsql.db.extension import loadable_path

        loadable_path()
    except ExtensionError as missing:
        return IndexingError(f"writing an index needs hybridsql's native extension: {missing}")
    return IndexingError(
        "writing an index needs hybridsql's native extension, which this connection"
        f" has not loaded ({detail})"
    )


def ensure_schema(conn: apsw.Connection, path: str | None = None) -> bool:
    """Creates the schema if missing, or upgrades an older one, in one transaction; returns
    whether FTS5 is available in this SQLite. Needs the native extension (vector_index).

    In an index of this version, a lost column is refused (DatabaseError naming ``path``, by
    default the connection's file), and lost tables, views and triggers are made again, then
    what they keep in step is brought back in step (_resync)."""
    import apsw  # here, not at import: a cold start stays light

    with conn:
        version = schema_version(conn)
        if version is not None and version > SCHEMA_VERSION:
            raise IndexingError(
                f"this index was made by a newer hybridsql (schema {version}; this one knows"
                f" {SCHEMA_VERSION}): upgrade hybridsql"
            )
        current = version == SCHEMA_VERSION
        if current:
            missing_column(conn, path or conn.filename)
            before = _present(conn)
            _drop_stale_triggers(conn)
        if version == 1:
            _upgrade_from_1(conn)
        elif version == 2:
            _upgrade_from_2(conn)
        if version in (1, 2, 3):
            _upgrade_from_3(conn)
        if version in (1, 2, 3, 4, 5):
            _upgrade_trigrams(conn)
        if version in (1, 2, 3, 4, 5, 6):
            _upgrade_from_6(conn)
        try:
            conn.execute(TABLES)
        except apsw.SQLError as e:
            if "vector_index" in str(e):
                raise without_native(str(e)) from e
            raise
        try:
            conn.execute(FTS)
            fts = True
        except apsw.SQLError as e:
            if "fts5" not in str(e):
                raise
            fts = False
        if current and set(_present(conn)) - set(before):
            _resync(conn, fts)
    return fts


def _present(conn: apsw.Connection) -> list:
    """The names of the tables, views and triggers in the database."""
    sql = "select name from sqlite_schema where type in ('table', 'view', 'trigger')"
    return [name for (name,) in conn.execute(sql)]


def missing_column(conn: apsw.Connection, path: str) -> None:
    """Raises DatabaseError, in one line, for a table of the index that lacks a column."""
    found: dict = {}
    for table, column in conn.execute(
        "select m.name, p.name from sqlite_schema m join pragma_table_info(m.name) p"
        " where m.type = 'table' and m.name in (select value from json_each(?))",
        (json.dumps(list(COLUMNS)),),
    ):
        found.setdefault(table, []).append(column)
    for table, columns in found.items():
        lost = [c for c in COLUMNS[table] if c not in columns]
        if not lost:
            continue
        what = f"{path}: the table {table} has no column {lost[0]}"
        new = [c for c in columns if c not in COLUMNS[table]]
        if len(lost) == 1 and len(new) == 1:
            raise DatabaseError(
                f"{what} (renamed to {new[0]}?); rename it back with"
                f" `sqlite-utils transform {path} {table} --rename {new[0]} {lost[0]}`"
            )
        raise DatabaseError(f"{what} (it was renamed or dropped); restore the file from a backup")


def whole(conn: apsw.Connection, path: str) -> None:
    """Raises DatabaseError, in one line, unless the index has every column, table, view and
    trigger it needs (full-text ones only where it has full-text search): what a read-only open
    checks, since it cannot repair (a writing open re-creates what is missing, in
    ensure_schema)."""
    missing_column(conn, path)
    present = set(_present(conn))
    fts_parts = FTS_PARTS
    version = schema_version(conn) or SCHEMA_VERSION
    if version == 5:  # searched read-only as it is: its views' names
        fts_parts = tuple(_SCHEMA_5_NAMES.get(name, name) for name in FTS_PARTS)
    parts = tuple(name for name in PARTS if _ADDED.get(name, 0) <= version)
    expected = parts + (fts_parts if present & set(fts_parts) else ())
    lost = [name for name in expected if name not in present]
    if lost:
        raise DatabaseError(
            f"{path} is missing {', '.join(lost)} (a table rebuilt by another tool, such as"
            " `sqlite-utils transform`, loses its triggers); open it once for writing to make"
            " them again, with"
            f" `hybridsql index DIR --db {path}` or any `hybridsql memory` command that writes"
        )


def _resync(conn: apsw.Connection, fts: bool) -> None:
    """After parts of an index were re-created (a table rebuilt by another tool loses its
    triggers): what the triggers would have done since is done now. Rows whose parent is gone
    are deleted, and the full-text tables are filled again from chunks."""
    conn.execute(
        "delete from chunks where kind = 'document' and file_id not in (select id from files);"
        " delete from memories where chunk_id not in (select id from chunks);"
        " delete from vectors where chunk_id not in (select id from chunks);"
        " delete from session_memories where memory_id not in (select chunk_id from memories);"
        " delete from memory_links where from_id not in (select chunk_id from memories)"
        " or to_id not in (select chunk_id from memories);"
    )
    conn.execute(_FILL_CHUNK_KEYS)
    if fts:
        conn.execute("insert into chunks_fts(chunks_fts) values ('delete-all')")
        _fill_fts(conn)


def schema_version(conn: apsw.Connection):
    """meta.schema_version, or None for a database with no hybridsql index."""
    has_meta = conn.execute(
        "select count(*) from sqlite_schema where type = 'table' and name = 'meta'"
    ).fetchone()[0]
    if not has_meta:
        return None
    row = conn.execute("select value from meta where key = 'schema_version'").fetchone()
    return None if row is None else row[0]


def _upgrade_from_1(conn: apsw.Connection) -> None:
    """Schema 1 kept vectors in a plain table, with triggers counting writes in
    meta.vectors_version: they move into the vector_index table. A row the new table refuses
    (a malformed vector, or dimensions unlike its model's other vectors) is left out; its chunk
    is embedded again by the next indexing run. Its full-text tables held both kinds of chunks:
    they are made again, one pair per kind."""
    import apsw  # here, not at import: a cold start stays light

    conn.execute(
        "drop trigger if exists vectors_count_insert; drop trigger if exists vectors_count_update;"
        " drop trigger if exists vectors_count_delete; drop trigger if exists chunks_delete;"
        " drop index if exists vectors_model; alter table vectors rename to vectors_schema1;"
    )
    conn.execute(TABLES)
    insert = "insert into vectors(chunk_id, vector, model_id, kind)"
    rows = (
        "select v.chunk_id, v.vector, v.model_id, c.kind"
        " from vectors_schema1 v join chunks c on c.id = v.chunk_id order by v.chunk_id"
    )
    try:
        with conn:
            conn.execute(f"{insert} {rows}")
    except apsw.Error:  # then row by row, leaving out those refused
        for row in conn.execute(rows).fetchall():
            try:
                with conn:
                    conn.execute(f"{insert} values (?, ?, ?, ?)", row)
            except apsw.Error:
                pass
    conn.execute(
        "drop table vectors_schema1; delete from meta where key = 'vectors_version';"
        " update meta set value = 3 where key = 'schema_version'"
    )
    fts = conn.execute(
        "select count(*) from sqlite_schema where type = 'table' and name = 'chunks_fts'"
    ).fetchone()[0]
    if fts:
        conn.execute(
            "drop trigger if exists chunks_fts_insert; drop trigger if exists chunks_fts_delete;"
            " drop trigger if exists chunks_fts_update; drop table chunks_fts;"
            " drop table chunks_trigram;"
        )
        conn.execute(FTS)
        _fill_fts(conn)


def _upgrade_from_2(conn: apsw.Connection) -> None:
    """Schema 2 declared chunks_fts over the view document_chunks, in single quotes, which
    sqlite-utils and Datasette do not recognise: it is made again over chunks, with the same
    words, so every search answers as before."""
    if has_fts(conn):
        conn.execute("drop table chunks_fts")
        conn.execute(FTS)
        conn.execute(_FILL_CHUNKS_FTS)
    conn.execute("update meta set value = 3 where key = 'schema_version'")


def _upgrade_from_3(conn: apsw.Connection) -> None:
    """Schema 3 kept every vector twice: in vectors and in embedding_cache (a WITHOUT ROWID
    table, whose 1.5 KB rows each spilled onto an overflow page: 4.6 KB a vector). The cache is
    made again as CACHE_TABLE without the vectors that the index holds; the index's vectors serve
    as the cache from then on (found by chunk_keys, made by TABLES)."""
    conn.execute(TABLES)
    conn.execute(_FILL_CHUNK_KEYS)
    if conn.execute(_HAS_CACHE).fetchone()[0]:
        _upgrade_cache(conn)
    conn.execute("update meta set value = 4 where key = 'schema_version'")


def _upgrade_trigrams(conn: apsw.Connection) -> None:
    """The trigram tables are made again over the chunks the class of this version holds
    (FTS): schema 4's held every chunk, schema 5's those with CJK text, where now Thai, Lao,
    Myanmar and Khmer text is theirs too. Nothing is embedded again, and the porter tables stay
    as they are. The pages they freed stay in the file for later writes (or a VACUUM)."""
    if has_fts(conn):
        conn.execute(
            "drop trigger if exists chunks_fts_insert; drop trigger if exists chunks_fts_delete;"
            " drop trigger if exists chunks_fts_update; drop table if exists chunks_trigram;"
            " drop table if exists memories_trigram; drop view if exists document_chunks;"
            " drop view if exists document_cjk_chunks; drop view if exists memory_cjk_chunks;"
        )
        conn.execute(FTS)
        for table in ("chunks_trigram", "memories_trigram"):
            conn.execute(f"insert into {table}({table}) values ('rebuild')")
    conn.execute("update meta set value = 6 where key = 'schema_version'")


def _upgrade_from_6(conn: apsw.Connection) -> None:
    """Schemas before 7 did not record which model made the vectors: every such index that has
    vectors of the local model was made by all-MiniLM-L6-v2 (the only one), recorded now, with
    no fingerprint (the next writer with that model fills it in), and its chunks as cut by that
    model's tokenizer. Another provider's vectors keep their model id, as before; its next write
    records it."""
    conn.execute(TABLES)
    found = conn.execute(
        "select length(vector) / 4 from vectors where model_id = ? limit 1", (MINILM_ID,)
    ).fetchone()
    if found is not None and not conn.execute("select 1 from index_model").fetchone():
        record_model(conn, MINILM_ID, "local", "all-MiniLM-L6-v2", found[0], "")
        conn.execute(
            "insert or replace into meta select 'chunk_tokenizer', ? where exists"
            " (select 1 from meta where key = 'chunk_tokens')",
            (MINILM_ID,),
        )
    conn.execute("update meta set value = 7 where key = 'schema_version'")


# -- the index's model ----------------------------------------------------------------------

MINILM_ID = "all-MiniLM-L6-v2-int8"  # the vectors' id of the one local model before schema 7


def recorded_model(conn: apsw.Connection) -> dict | None:
    """The model the index records as the maker of its vectors (its first row: model_id,
    provider, name, dims, fingerprint), or None: no table (not an index of schema 6), no row
    (nothing embedded yet)."""
    if not conn.execute(
        "select 1 from sqlite_schema where type = 'table' and name = 'index_model'"
    ).fetchone():
        return None
    row = conn.execute(
        "select model_id, provider, name, dims, fingerprint from index_model order by rowid limit 1"
    ).fetchone()
    return None if row is None else dict(zip(COLUMNS["index_model"], row, strict=True))


def record_model(
    conn: apsw.Connection, model_id: str, provider: str, name: str, dims: int, fingerprint: str
) -> None:
    """Records the model that makes the index's vectors, in place of any other."""
    conn.execute("delete from index_model")
    conn.execute(
        "insert into index_model(model_id, provider, name, dims, fingerprint)"
        " values (?, ?, ?, ?, ?)",
        (model_id, provider, name, dims, fingerprint),
    )


_FILL_CHUNK_KEYS = (
    "delete from chunk_keys;"
    " insert into chunk_keys select length(c.text), substr(c.text, -24), c.id from chunks c"
    " where not exists (select 1 from files where id = c.file_id and root glob 'collection:*')"
)
_FILL_CHUNKS_FTS = (
    "insert into chunks_fts(rowid, text) select id, text from chunks where kind = 'document'"
)


def _fill_fts(conn: apsw.Connection) -> None:
    """Fills the full-text tables, made empty, from chunks."""
    for table in (t for pair in FTS_TABLES.values() for t in pair if t != "chunks_fts"):
        conn.execute(f"insert into {table}({table}) values ('rebuild')")
    conn.execute(_FILL_CHUNKS_FTS)


# -- the embedding cache ------------------------------------------------------------------------
#
# Vectors embedded but not in the index: a query's, a chunk's between its embedding and its
# file's transaction (so a stopped run resumes without embedding it again), a deleted document
# chunk's (keep_leaving_vectors: a file that comes back is not embedded again). A vector that
# the index holds leaves the cache (prune_cache): a text is looked up in the index by
# chunk_keys, where the index's vectors of the model were made as the cache's are, which meta
# records as 'vectors MODEL' = the cache id (model and revision; '' once two were mixed).
# text_length and text_tail are the text's key in chunk_keys.

# Rows are numbered in the order they came (autoincrement: a deleted row's number is not given
# again), so that a prune looks only at rows added since the last one.
CACHE_TABLE = """create table if not exists embedding_cache(
  id integer primary key autoincrement, model_id text not null, text_sha256 blob not null,
  vector blob not null, text_length integer, text_tail text, unique (model_id, text_sha256)
)"""
_HAS_CACHE = "select count(*) from sqlite_schema where type = 'table' and name = 'embedding_cache'"
# The vector of the text ?1 that the index holds for the model ?2.
INDEX_VECTOR = (
    "select v.vector from chunk_keys k join chunks c on c.id = k.chunk_id"
    " join vectors v on v.chunk_id = c.id"
    " where k.length = length(?1) and k.tail = substr(?1, -24) and c.text = ?1"
    " and v.model_id = ?2 limit 1"
)
# The cache row of a text (?1 text, ?2 model, ?3 cache id, ?4 its sha256) whose vector the index
# holds: the FROM and WHERE of Embedder._prune's check (select 1) and delete.
CACHED_IN_INDEX = (
    f"from embedding_cache where model_id = ?3 and text_sha256 = ?4 and vector = ({INDEX_VECTOR})"
)
# Deletes the cache rows of the cache id ?1 whose vector the index holds for the model ?2, of
# rowid over ?3.
_PRUNE = """delete from embedding_cache where model_id = ?1 and id > ?3 and exists (
  select 1 from chunk_keys k join vectors v on v.chunk_id = k.chunk_id
  where k.length = embedding_cache.text_length and k.tail = embedding_cache.text_tail
    and v.model_id = ?2 and v.vector = embedding_cache.vector
)"""


def ensure_cache(conn: apsw.Connection, model_id: str, cache_id: str) -> bool:
    """Makes the embedding cache if missing (upgrading one of schema 3); returns whether the
    index in ``conn`` (if any) holds vectors made as ``cache_id`` makes them, so that they serve
    as the cache. Writes nothing to an index whose record says so already."""
    with conn:
        conn.execute(CACHE_TABLE)
        columns = {
            c for (c,) in conn.execute("select name from pragma_table_info('embedding_cache')")
        }
        if "text_length" not in columns:
            _upgrade_cache(conn)
        readable = "select count(*) from pragma_module_list where name = 'vector_index'"
        if (
            not {"meta", "chunks", "vectors", "chunk_keys"} <= set(_present(conn))
            or not conn.execute(readable).fetchone()[0]  # the Python functions only
        ):
            return False
        key = f"vectors {model_id}"
        row = conn.execute("select value from meta where key = ?", (key,)).fetchone()
        if row is None:
            made = "select exists(select 1 from vectors where model_id = ?)"
            if conn.execute(made, (model_id,)).fetchone()[0]:
                return False  # vectors made before the record, by a revision unknown
            conn.execute("insert into meta values (?, ?)", (key, cache_id))
        elif row[0] != cache_id:
            # Vectors of another revision are there, and this one may add its own.
            conn.execute("update meta set value = '' where key = ?", (key,))
            return False
    keep_leaving_vectors(conn, model_id, cache_id)
    return True


def unpruned_cache(conn: apsw.Connection) -> tuple[int, int] | None:
    """(the last rowid pruned, the cache's last rowid) when rows were added to the cache since
    the last prune (meta 'cache pruned'), else None. Reads only."""
    row = conn.execute("select value from meta where key = 'cache pruned'").fetchone()
    since = row[0] if row else 0
    last = conn.execute("select coalesce(max(id), 0) from embedding_cache").fetchone()[0]
    return (since, last) if last > since else None


def prune_cache(conn: apsw.Connection, model_id: str, cache_id: str) -> int:
    """Deletes the cache's vectors of ``cache_id`` that the index holds, among the rows added
    since the last prune (unpruned_cache); returns how many. The caller holds the write lock
    (or stops between the two statements: the same rows are then checked again next time)."""
    span = unpruned_cache(conn)
    if span is None:
        return 0
    conn.execute(_PRUNE, (cache_id, model_id, span[0]))
    gone = conn.changes()
    conn.execute("insert or replace into meta values ('cache pruned', ?)", (span[1],))
    return gone


def keep_leaving_vectors(conn: apsw.Connection, model_id: str, cache_id: str) -> None:
    """On this connection, a document chunk's vector of ``model_id`` goes into the cache when
    the chunk is deleted (a file deleted or rewritten): a file that comes back (a `git
    checkout` of another branch, then back) is not embedded again. A TEMP trigger, since its
    key is the text's sha256, a function of this connection's; an agent's memories are not kept
    (a hard delete forgets them). Copies of texts written again at once are pruned
    (prune_cache)."""
    import hashlib

    def sha256(text):
        return hashlib.sha256(text.encode("utf-8")).digest() if isinstance(text, str) else None

    conn.create_scalar_function("hybridsql_text_sha256", sha256, 1, deterministic=True)
    # The model and cache id are values, not SQL text: the trigger reads them from a TEMP table.
    conn.execute(
        "create temp table if not exists hybridsql_embedder(model_id text, cache_id text);"
        " delete from temp.hybridsql_embedder"
    )
    conn.execute("insert into temp.hybridsql_embedder values (?, ?)", (model_id, cache_id))
    conn.execute(
        "create temp trigger if not exists hybridsql_keep_vectors before delete on main.chunks"
        " when old.kind = 'document' begin"
        " insert or ignore into embedding_cache(model_id, text_sha256, vector, text_length,"
        " text_tail)"
        " select e.cache_id, hybridsql_text_sha256(old.text), v.vector, length(old.text),"
        " substr(old.text, -24) from hybridsql_embedder e join vectors v"
        " on v.chunk_id = old.id and v.model_id = e.model_id;"
        " end"
    )


def _upgrade_cache(conn: apsw.Connection) -> None:
    """The cache of schema 3 (model_id, text_sha256, vector), WITHOUT ROWID, made again as
    CACHE_TABLE with the rows that the index lacks, each with its text's key when a chunk has
    its text. For each model, the cache id whose rows the index holds byte for byte is recorded
    as the one that made its vectors (none when two did)."""
    import hashlib

    present = set(_present(conn))
    texts = {}
    if "chunks" in present:
        for (text,) in conn.execute("select distinct text from chunks"):
            texts[hashlib.sha256(text.encode("utf-8")).digest()] = text
    readable = "select count(*) from pragma_module_list where name = 'vector_index'"
    index = {"vectors", "chunk_keys"} <= present and conn.execute(readable).fetchone()[0]
    models = [m for (m,) in conn.execute("select distinct model_id from vectors")] if index else []
    conn.execute("alter table embedding_cache rename to embedding_cache_3")
    conn.execute(CACHE_TABLE)
    made_by: dict = {}
    insert = (
        "insert into embedding_cache(model_id, text_sha256, vector, text_length, text_tail)"
        " values (?1, ?2, ?3, length(?4), substr(?4, -24))"
    )
    old = "select model_id, text_sha256, vector from embedding_cache_3"
    for cache_id, key, vector in conn.execute(old).fetchall():
        text = texts.get(key)
        model = next((m for m in models if cache_id == m or cache_id.startswith(m + "@")), None)
        if text is not None and model is not None:
            found = conn.execute(INDEX_VECTOR, (text, model)).fetchone()
            if found is not None and found[0] == vector:
                made_by.setdefault(model, set()).add(cache_id)
                continue
        conn.execute(insert, (cache_id, key, vector, text))
    conn.execute("drop table embedding_cache_3")
    for model, ids in made_by.items():
        record = ids.pop() if len(ids) == 1 else ""
        conn.execute("insert or replace into meta values (?, ?)", (f"vectors {model}", record))


def check_index(conn: apsw.Connection, path: str, readonly: bool, create: bool = False) -> None:
    """Raises DatabaseError unless ``path`` holds a hybridsql index this version can use.

    An index is known by ``meta.schema_version``. A newer one is refused. An older one is
    refused when ``readonly`` (only a writing open upgrades it, in ensure_schema), unless it is
    SEARCHABLE_FROM or later: schema 5, whose trigram tables hold the chunks with CJK text but not
    those of Thai, Lao, Myanmar or Khmer, is searched as it is (a query in those scripts finds
    nothing there, and then LIKE, which reads every chunk, matches its trigrams). ``create``
    accepts a new or empty file (ensure_schema makes the index), never one that holds another
    application's tables, nor an empty one that another application has claimed (its
    ``application_id`` or ``user_version`` set, which hybridsql never sets): nothing is added
    to it.
    """
    import apsw  # here, not at import: a cold start stays light

    claims = conn.execute(
        "select (select count(*) from sqlite_schema), (select application_id from"
        " pragma_application_id), (select user_version from pragma_user_version)"
    ).fetchone()
    if create and not any(claims):
        return
    try:
        version = schema_version(conn)
    except apsw.SQLError:  # another application's table called meta
        version = None
    if type(version) is not int:
        make = f"create one with `hybridsql index DIR --db {path}`"
        raise DatabaseError(
            f"{path} is not a hybridsql index; {'use another file' if create else make}"
        )
    if version > SCHEMA_VERSION:
        raise DatabaseError(
            f"{path} was made by a newer hybridsql (schema {version}, this one knows "
            f"{SCHEMA_VERSION}); upgrade hybridsql to use it"
        )
    if version < SEARCHABLE_FROM and readonly:
        raise DatabaseError(
            f"{path} was made by an older hybridsql (schema {version}); run "
            f"`hybridsql index DIR --db {path}` to upgrade it"
        )


def has_fts(conn: apsw.Connection) -> bool:
    """Whether the FTS5 tables exist in this database."""
    return bool(
        conn.execute("select count(*) from sqlite_schema where name = 'chunks_fts'").fetchone()[0]
    )
