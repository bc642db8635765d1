"""Indexing a memory folder, and the ``HybridIndex`` that users hold.

Files are tracked by sha256: only changed files are re-chunked, only new chunk texts are
embedded (the embedding cache), and deleted files leave the index. Each file is written in its
own transaction, so an interrupted run leaves a consistent index that the next run completes.
"""

import hashlib
import os
import stat
import sys
import time
from dataclasses import dataclass, field

import apsw

from hybridsql.chunking import chunk_markdown
from hybridsql.embed import Embedder, resolve_provider
from hybridsql.errors import IndexingError
from hybridsql.extension import connect
from hybridsql.schema import ensure_schema
from hybridsql.search import (
    Profile,
    Searcher,
    SearchOptions,
    clean_text,
    document_profile,
)

MARKDOWN = (".md", ".markdown")
SKIP_DIRS = {"node_modules", "__pycache__"}
MAX_FILE_BYTES = 20 * 1024 * 1024
EMBED_BATCH = 64  # chunks embedded together, across small files


@dataclass
class IndexReport:
    """What an indexing run did, file by file."""

    files_seen: int = 0
    files_indexed: int = 0
    files_unchanged: int = 0
    files_deleted: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0
    skipped: list = field(default_factory=list)  # [path, reason]
    warnings: list = field(default_factory=list)
    seconds: float = 0.0


def discover(root: str):
    """Markdown files under ``root`` (MEMORY.md, memory/**, any *.md), as sorted relative paths.

    Hidden folders, node_modules, symbolic links and anything but regular files (a named pipe
    would block the read for ever) are passed over.
    """
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        for name in files:
            full = os.path.join(folder, name)
            if name.lower().endswith(MARKDOWN) and stat.S_ISREG(os.lstat(full).st_mode):
                found.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return sorted(found)


class Progress:
    """A one-line progress bar on a terminal; silent when stderr is not one."""

    def __init__(self, total: int, stream=None):
        self.stream = stream or sys.stderr
        self.total = total
        self.live = self.stream.isatty() and total > 0

    def update(self, done: int, label: str) -> None:
        if self.live:
            width = 30
            filled = width * done // self.total
            self.stream.write(
                f"\rindexing [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                f"{label[:40]:<40}"
            )
            self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\n")


def read_markdown(path: str, max_bytes: int):
    """(text, sha256, size, warning) of a file, or (None, reason) when it is skipped."""
    size = os.path.getsize(path)
    if size > max_bytes:
        return None, f"larger than {max_bytes} bytes ({size})"
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if b"\0" in data[:8192]:
        return None, "binary (has NUL bytes)"
    warning = None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        text = data.decode("utf-8", errors="replace")
        warning = f"invalid UTF-8 at byte {e.start}, replaced with U+FFFD"
    return (text.lstrip("\ufeff"), hashlib.sha256(data).hexdigest(), len(data), warning), None


class HybridIndex:
    """A memory index in one SQLite file: index folders, add memories, search.

    ``embedder`` is "auto" (the local model when installed, else keyword-only), "none",
    "local", "openai", None ($HYBRIDSQL_EMBEDDER, else auto), an EmbeddingProvider, or an
    Embedder.
    """

    def __init__(self, db_path: str, embedder="auto", backend: str = "auto", **provider_options):
        self.db_path = db_path
        self.conn = connect(db_path, backend="auto" if backend in ("sql", "auto") else backend)
        # ensure_schema reads the schema, then writes: under the write lock, so that opening
        # an index while others write waits on the busy timeout instead of failing 'locked'.
        with transaction(self.conn):
            self.fts = ensure_schema(self.conn)
        self.embedder = self._embedder(embedder, provider_options)
        native = self.conn.execute("select hybridsql_debug()").fetchone()[0]
        self.searcher = Searcher(self.conn, self.embedder, "backend extension" in native)

    def _embedder(self, embedder, options):
        if isinstance(embedder, Embedder):
            return embedder
        if embedder is None or isinstance(embedder, str):
            provider = resolve_provider(embedder, **options)
        else:
            provider = embedder
        return Embedder(provider, self.conn) if provider is not None else None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def search(self, query: str, **options):
        """Hybrid search of the memory files; ``options`` are the fields of SearchOptions."""
        return self.searcher.search(query, SearchOptions(**options), self.documents())

    def documents(self) -> Profile:
        """The documents-only profile; while the database holds no memories, the keyword side
        need not test each match's kind."""
        memories = self.conn.execute(
            "select exists(select 1 from chunks where kind = 'memory')"
        ).fetchone()[0]
        return document_profile(mixed=bool(memories))

    def index_folder(self, root: str, max_file_bytes: int = MAX_FILE_BYTES, progress=None):
        """Indexes the markdown under ``root``; returns an IndexReport."""
        if not os.path.isdir(root):
            raise IndexingError(f"{root} is not a folder")
        started = time.monotonic()
        root = os.path.abspath(root)
        # Names are stored as contents are: undecodable bytes (lone surrogates from os.walk)
        # become U+FFFD; files are still read by their real names.
        stored_root = clean_text(root)
        report = IndexReport()
        paths = discover(root)
        report.files_seen = len(paths)
        known = {
            path: (file_id, sha)
            for file_id, path, sha in self.conn.execute(
                "select id, path, sha256 from files where root = ?", (stored_root,)
            )
        }
        bar = progress or Progress(len(paths))
        pending = []
        for n, rel in enumerate(paths, 1):
            name = clean_text(rel)
            bar.update(n, name)
            try:
                got, reason = read_markdown(os.path.join(root, rel), max_file_bytes)
            except OSError as e:
                got, reason = None, f"unreadable: {e.strerror}"
            if got is None:
                report.skipped.append([name, reason])
                continue
            text, sha, size, warning = got
            if name != rel:
                report.warnings.append([name, "the file name is not UTF-8"])
            if warning:
                report.warnings.append([name, warning])
            if name in known and known[name][1] == sha:
                report.files_unchanged += 1
                continue
            chunks = chunk_markdown(text)
            mtime = os.path.getmtime(os.path.join(root, rel))
            pending.append((name, sha, size, mtime, chunks))
            if sum(len(p[4]) for p in pending) >= EMBED_BATCH:
                self._write_files(stored_root, pending, report)
                pending = []
        self._write_files(stored_root, pending, report)
        seen = {clean_text(p) for p in paths}
        for path, (file_id, _) in known.items():
            if path not in seen:
                with self.conn:
                    self.conn.execute("delete from files where id = ?", (file_id,))
                report.files_deleted += 1
        report.chunks_embedded += self.embed_missing()
        bar.close()
        report.seconds = round(time.monotonic() - started, 3)
        return report

    def _write_files(self, root, pending, report) -> None:
        """Embeds the chunks of several files at once, then writes each file in a transaction."""
        if not pending:
            return
        vectors = None
        if self.embedder is not None:
            vectors = iter(self.embedder.embed([c.text for p in pending for c in p[4]]))
        for rel, sha, size, mtime, chunks in pending:
            file_vectors = [next(vectors) for _ in chunks] if vectors is not None else []
            self._write_file(root, rel, sha, size, mtime, chunks, file_vectors)
            report.chunks_embedded += len(file_vectors)
            report.files_indexed += 1
            report.chunks_written += len(chunks)

    def _write_file(self, root, rel, sha, size, mtime, chunks, vectors) -> None:
        conn = self.conn
        with transaction(conn):
            conn.execute("delete from files where root = ? and path = ?", (root, rel))
            conn.execute(
                "insert into files(root, path, sha256, size, mtime) values (?, ?, ?, ?, ?)",
                (root, rel, sha, size, mtime),
            )
            file_id = conn.last_insert_rowid()
            for i, chunk in enumerate(chunks):
                conn.execute(
                    "insert into chunks(kind, file_id, path, start_line, end_line, heading, text,"
                    " created_at) values ('document', ?, ?, ?, ?, ?, ?, ?)",
                    (
                        file_id,
                        rel,
                        chunk.start_line,
                        chunk.end_line,
                        chunk.heading,
                        chunk.text,
                        mtime,
                    ),
                )
                if vectors:
                    conn.execute(
                        "insert into vectors(chunk_id, vector, model_id, kind)"
                        " values (?, ?, ?, 'document')",
                        (
                            conn.last_insert_rowid(),
                            vectors[i].astype("<f4").tobytes(),
                            self.embedder.model_id,
                        ),
                    )

    def embed_missing(self, batch: int = EMBED_BATCH) -> int:
        """Embeds every chunk that has no vector of the current model; returns how many."""
        if self.embedder is None:
            return 0
        model = self.embedder.model_id
        done, after = 0, None
        while True:
            rows = self.conn.execute(
                "select c.id, c.text, c.kind from chunks c where c.id > coalesce(?, -1 << 63)"
                " and c.id not in (select chunk_id from vectors where model_id = ?)"
                " order by c.id limit ?",
                (after, model, batch),
            ).fetchall()
            if not rows:
                return done
            vectors = self.embedder.embed([text for _, text, _ in rows])
            with transaction(self.conn):
                self.conn.executemany(
                    "insert or replace into vectors(chunk_id, vector, model_id, kind)"
                    " values (?, ?, ?, ?)",
                    [
                        (cid, v.astype("<f4").tobytes(), model, kind)
                        for (cid, _, kind), v in zip(rows, vectors, strict=True)
                    ],
                )
            done += len(rows)
            after = rows[-1][0]


class transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error: the write lock is taken up front, so
    two writers wait on the busy timeout instead of failing with a deadlock."""

    def __init__(self, conn: apsw.Connection):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("begin immediate")
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        self.conn.execute("commit" if exc_type is None else "rollback")
        return False
