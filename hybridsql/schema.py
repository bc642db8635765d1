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
create index if not exists chunks_kind on chunks(kind);

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
