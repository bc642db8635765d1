"""The database schema: one table of chunks, its two FTS5 indexes, and its vectors.

Memory files and an agent's memories are both rows of ``chunks`` (``kind`` tells which), so one
search statement serves both. Triggers keep the FTS5 tables and ``vectors`` in step with
``chunks``, cascade deletes (files to chunks to vectors), and count every change to
``vectors`` in ``meta`` so that cached copies of the
vectors (the numpy matrix) know when to refresh.
"""

import apsw

SCHEMA_VERSION = 1

TABLES = """
create table if not exists meta(key text primary key, value) without rowid;
insert or ignore into meta values ('schema_version', 1), ('vectors_version', 0);

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

create table if not exists vectors(
  chunk_id integer primary key, -- chunks(id)
  model_id text not null,
  vector blob not null          -- float32 little-endian
);
create index if not exists vectors_model on vectors(model_id);

-- Deletes cascade by trigger, so they hold whatever a client's foreign_keys setting is.
create trigger if not exists files_delete after delete on files begin
  delete from chunks where file_id = old.id;
end;
create trigger if not exists chunks_delete after delete on chunks begin
  delete from vectors where chunk_id = old.id;
end;

create trigger if not exists vectors_count_insert after insert on vectors begin
  update meta set value = value + 1 where key = 'vectors_version';
end;
create trigger if not exists vectors_count_update after update on vectors begin
  update meta set value = value + 1 where key = 'vectors_version';
end;
create trigger if not exists vectors_count_delete after delete on vectors begin
  update meta set value = value + 1 where key = 'vectors_version';
end;
"""

FTS = """
create virtual table if not exists chunks_fts using fts5(
  text, content='chunks', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
create virtual table if not exists chunks_trigram using fts5(
  text, content='chunks', content_rowid='id', tokenize='trigram'
);
create trigger if not exists chunks_fts_insert after insert on chunks begin
  insert into chunks_fts(rowid, text) values (new.id, new.text);
  insert into chunks_trigram(rowid, text) values (new.id, new.text);
end;
create trigger if not exists chunks_fts_delete after delete on chunks begin
  insert into chunks_fts(chunks_fts, rowid, text) values ('delete', old.id, old.text);
  insert into chunks_trigram(chunks_trigram, rowid, text) values ('delete', old.id, old.text);
end;
create trigger if not exists chunks_fts_update after update of text on chunks begin
  insert into chunks_fts(chunks_fts, rowid, text) values ('delete', old.id, old.text);
  insert into chunks_trigram(chunks_trigram, rowid, text) values ('delete', old.id, old.text);
  insert into chunks_fts(rowid, text) values (new.id, new.text);
  insert into chunks_trigram(rowid, text) values (new.id, new.text);
end;
"""


def ensure_schema(conn: apsw.Connection) -> bool:
    """Creates the schema if missing; returns whether FTS5 is available in this SQLite."""
    with conn:
        conn.execute(TABLES)
        try:
            conn.execute(FTS)
            fts = True
        except apsw.SQLError as e:
            if "fts5" not in str(e):
                raise
            fts = False
    return fts


def has_fts(conn: apsw.Connection) -> bool:
    """Whether the FTS5 tables exist in this database."""
    return bool(
        conn.execute("select count(*) from sqlite_schema where name = 'chunks_fts'").fetchone()[0]
    )


def vectors_version(conn: apsw.Connection) -> int:
    """A counter that changes whenever any connection writes to ``vectors``."""
    return conn.execute("select value from meta where key = 'vectors_version'").fetchone()[0]
