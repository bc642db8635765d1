"""Indexing a memory folder, and the ``HybridIndex`` that users hold.

Files are tracked by sha256: only changed files are re-chunked, only new chunk texts are
embedded (the embedding cache), and deleted files leave the index. Each file is written in its
own transaction, so an interrupted run leaves a consistent index that the next run completes.
"""

import hashlib
import json
import os
import queue
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw

from hybridsql.db.extension import DAMAGED, close, connect, file_error, transaction
from hybridsql.db.schema import (
    COLUMNS,
    check_index,
    ensure_schema,
    has_fts,
    record_model,
    recorded_model,
    whole,
    without_native,
)
from hybridsql.embedding.choice import Missing, check, choose, provider_kind, provider_name
from hybridsql.embedding.embedder import Embedder, LocalProvider
from hybridsql.embedding.local_model import runs_locally
from hybridsql.embedding.models import KNOWN, prepare_sql_embed
from hybridsql.errors import EmbeddingError, IndexingError, ModelMismatchError
from hybridsql.files.chunking import chunk_markdown
from hybridsql.files.discovery import (
    DEFAULT_GLOBS,
    FOLDER_NOT_READ,
    MAX_FILE_BYTES,
    UNREADABLE,
    Progress,
    discover,
    glob_spec,
    is_markdown,
    left_out_line,
    link_reason,
    not_regular,
    open_inside,
    plural,
)
from hybridsql.locking import one_call_at_a_time
from hybridsql.search import (
    Profile,
    Searcher,
    SearchOptions,
    SearchResults,
    clean_text,
    document_profile,
)

VECTOR_INDEX_LOADED = "select 1 from pragma_module_list where name = 'vector_index'"
EMBED_BATCH = 64  # chunks embedded together, across small files
READ_AHEAD = 16  # files read and chunked ahead of the one being embedded, at most
# A chunk's most tokens when the embedder reads more at once (or there is none); otherwise its
# window, less [CLS] and [SEP]: all of a chunk's text reaches its vector. Overlap is a fifth.
CHUNK_TOKENS = 400
VANISHED = "vanished while indexing"  # a file deleted between discovery and its reading


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
    model: str = ""  # the model that embedded, by name; "" keyword-only
    chunks_unreadable: int = 0  # chunks written whose vector is the zero vector: words alone
    globs: list = field(default_factory=list)  # the patterns that chose the files
    gitignore: bool = True
    left_out: dict = field(default_factory=dict)  # see discovery.discover


def read_markdown(root: str, rel: str, max_bytes: int):
    """(text, sha256, size, mtime, warning) of a file, or (None, reason) when it is skipped.

    The file is opened inside ``root`` without following symbolic links and must be a regular
    file when it is opened (it may have been swapped since it was discovered)."""
    try:
        fd = open_inside(root, rel, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, VANISHED
    except OSError as e:
        return None, link_reason(root, e) or f"{UNREADABLE}{e.strerror}"
    with open(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, not_regular(info.st_mode)
        if info.st_size > max_bytes:
            return None, f"larger than {max_bytes} bytes ({info.st_size})"
        data = f.read(max_bytes + 1)
    if b"\0" in data[:8192]:
        return None, "binary (has NUL bytes)"
    warning = None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        text = data.decode("utf-8", errors="replace")
        # A few bad bytes are text in another encoding (latin-1 accents): kept, with a warning.
        # Many are a binary file a pattern took (a PDF may have no NUL byte early): about 45 %
        # of the characters of random or compressed bytes decode as U+FFFD.
        if text.count("\ufffd") * 4 > len(text):
            return None, "binary (over a quarter of it is not UTF-8)"
        warning = f"invalid UTF-8 at byte {e.start}, replaced with U+FFFD"
    digest = hashlib.sha256(data).hexdigest()
    return (text.lstrip("\ufeff"), digest, len(data), info.st_mtime, warning), None


class Reader:
    """Reads and chunks a run's files in a thread of its own, at most READ_AHEAD ahead of the
    files taken from it, calling ``step(name)`` before it reads each. Iterating gives, in the
    files' order, (kind, name, what): "file" (what: ((name, sha256, size, mtime, chunks),
    warnings)), "unchanged" (what: (None, warnings)) or "skipped" (what: the reason). An error
    in the thread is raised by the iteration."""

    def __init__(self, root, paths, known, changed, max_file_bytes, chunking, step):
        self.args = root, paths, known, changed, max_file_bytes, chunking
        self.step = step
        self.files: queue.Queue = queue.Queue(READ_AHEAD)
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._read, name="hybridsql-read", daemon=True)
        self.thread.start()

    def _put(self, item) -> bool:
        while not self.closed.is_set():
            try:
                self.files.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _read(self) -> None:
        root, paths, known, changed, max_file_bytes, (most, overlap, counter) = self.args
        try:
            for rel in paths:
                self.step(clean_text(rel))
                if not self._put(
                    self._one(root, rel, known, changed, max_file_bytes, most, overlap, counter)
                ):
                    return
        except BaseException as e:
            self._put(("error", "", e))
            return
        self._put(None)

    @staticmethod
    def _one(root, rel, known, changed, max_file_bytes, most, overlap, counter):
        name = clean_text(rel)
        if changed is not None and rel not in changed and same_stat(root, rel, known.get(name)):
            return "unchanged", name, (None, [])
        got, reason = read_markdown(root, rel, max_file_bytes)
        if got is None:
            return "skipped", name, clean_text(reason)
        text, sha, size, mtime, warning = got
        warnings = ["the file name is not UTF-8"] if name != rel else []
        warnings += [warning] if warning else []
        if name in known and known[name][1] == sha:
            return "unchanged", name, (None, warnings)
        chunks = chunk_markdown(text, most, overlap, counter, headings=is_markdown(rel))
        return "file", name, ((name, sha, size, mtime, chunks), warnings)

    def __iter__(self):
        while (item := self.files.get()) is not None:
            if item[0] == "error":
                raise item[2]
            yield item

    def close(self) -> None:
        """Stops the thread (it may be waiting to hand over a file) and waits for it."""
        self.closed.set()
        self.thread.join()


class Computer:
    """The provider's side of an Embedder in a thread of its own, one batch at a time: ``send``
    texts, then ``receive`` their vectors (or the provider's error)."""

    def __init__(self, embedder):
        self.embedder = embedder
        self.local = isinstance(embedder.provider, LocalProvider)
        self.asked: queue.Queue = queue.Queue(1)
        self.answers: queue.Queue = queue.Queue(1)
        self.thread = threading.Thread(target=self._run, name="hybridsql-embed", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (texts := self.asked.get()) is not None:
            try:
                self.answers.put((True, self.embedder.compute(texts)))
            except BaseException as e:
                self.answers.put((False, e))

    def send(self, texts: list) -> None:
        self.asked.put(texts)

    def receive(self):
        ok, got = self.answers.get()
        if not ok:
            raise got
        return got

    def close(self) -> None:
        """Lets the thread end once its batch (if any) is done; does not wait for it: a run
        stopped by Ctrl-C stops now, losing only that batch."""
        self.asked.put(None)


class Work:
    """What the progress's time left is reckoned from: the bytes of the files a run must read
    and embed (those whose size or modification time changed since they were indexed, and new
    ones), and how many of them are done. A file found unchanged leaves the total."""

    def __init__(self, progress, root, paths, known, changed):
        self.progress = progress
        self.sizes = {}
        for rel in paths:
            name = clean_text(rel)
            if not same_stat(root, rel, known.get(name)):
                try:
                    self.sizes[name] = os.lstat(os.path.join(root, rel)).st_size
                except OSError:
                    self.sizes[name] = 0
        self.total = sum(self.sizes.values())
        self.finished = 0
        self.tell()

    def done(self, name: str, unchanged: bool = False, tell: bool = True) -> None:
        """``name`` is done (or found ``unchanged``); ``tell`` False leaves telling the progress
        to the caller: the files a batch's vectors complete are written at one moment, and told
        as one step, so that the time left is not reckoned between them."""
        size = self.sizes.pop(name, 0)
        if unchanged:
            self.total -= size
        else:
            self.finished += size
        if tell:
            self.tell()

    def tell(self) -> None:
        self.progress.work(self.finished, self.total)


@one_call_at_a_time
class HybridIndex:
    """A memory index in one SQLite file: index folders, add memories, search.

    ``embedder`` is "auto" (the local model when installed, else keyword-only), "none",
    "local", "openai", None ($HYBRIDSQL_EMBEDDER, else auto), an EmbeddingProvider, or an
    Embedder. ``model`` names the local provider's model (models.resolve: all-MiniLM-L6-v2,
    multilingual-e5-small, a converted model's id, a model file or a Hugging Face folder). The
    index records the model that made its vectors; with neither named, it is that model, and
    another one named is a ModelMismatchError, unless ``reembed`` (a writing open): then every
    vector is made again by the one named (at the next index_folder or embed_missing). Threads
    may share it: its methods run one at a time, under ``lock`` (``conn`` used directly is the
    caller's to share).
    """

    def __init__(
        self,
        db_path: str,
        embedder: str | Embedder | None = "auto",
        backend: str = "auto",
        readonly: bool = False,
        create: bool = True,
        model: str | os.PathLike | None = None,
        reembed: bool = False,
        **provider_options: Any,
    ) -> None:
        """``readonly`` opens with SQLITE_OPEN_READONLY, writes nothing and needs an index made by
        this version; otherwise the schema is created or upgraded, and ``create=False`` refuses
        a file that is missing or holds no index (DatabaseError)."""
        self.lock = threading.RLock()
        self.db_path = db_path
        self.readonly = readonly
        backend = "auto" if backend in ("sql", "auto") else backend
        if not readonly and os.path.exists(db_path):
            # Looked at read-only first: a file that is no index of ours is refused before
            # anything is written to it, even the switch to WAL.
            peek = connect(db_path, backend=backend, readonly=True)
            try:
                check_index(peek, db_path, readonly=False, create=create)
            finally:
                peek.close()
        self.conn = connect(db_path, backend=backend, readonly=readonly, create=create)
        try:
            if readonly:
                check_index(self.conn, db_path, readonly=True)
                whole(self.conn, db_path)
                self.fts = has_fts(self.conn)
            else:
                # ensure_schema reads the schema, then writes: under the write lock, so that
                # opening an index while others write waits on the busy timeout instead of
                # failing 'locked'.
                with transaction(self.conn):
                    self.fts = ensure_schema(self.conn, db_path)
        except BaseException as e:
            close(self.conn, damaged=isinstance(e, DAMAGED))
            problem = file_error(e, db_path, not readonly) if isinstance(e, apsw.Error) else None
            if problem is None:
                raise
            raise problem from e
        # the line of an index's model this client cannot find, if so
        self.missing: str | None = None
        self._unread: list = []  # an index run's files of mostly unreadable chunks
        self._recorded = False  # the embedder's model is recorded (record_model)
        try:
            self.embedder = self._embedder(embedder, model, reembed, provider_options)
        except BaseException:
            close(self.conn)
            raise
        native = self.conn.execute("select hybridsql_debug()").get
        self.searcher = Searcher(self.conn, self.embedder, "backend extension" in native)
        self.searcher.unavailable = self.missing

    def _embedder(self, embedder, model, reembed, options):
        recorded = recorded_model(self.conn)
        if reembed and self.readonly:
            raise IndexingError("reembed writes every vector again: open the index for writing")
        if isinstance(embedder, Embedder) or not (embedder is None or isinstance(embedder, str)):
            if model is not None:
                raise EmbeddingError(
                    "model= names the local provider's model: give it with embedder 'auto' or"
                    " 'local', not with a provider or an Embedder of your own"
                )
            provider = embedder.provider if isinstance(embedder, Embedder) else embedder
        else:
            provider = choose(recorded, embedder, model, options, self.db_path)
        if isinstance(provider, Missing):
            self.missing, provider = provider.line, None
        check(recorded, provider, reembed, self.db_path)
        if reembed and provider is not None:
            self._replace_vectors(provider)
        if provider is None:
            return None
        if isinstance(embedder, Embedder):
            return embedder
        # A read-only index reads and writes no embedding cache: the query is embedded afresh.
        return Embedder(provider, None if self.readonly else self.conn)

    def _replace_vectors(self, provider) -> None:
        """--reembed: every vector, and the cached vectors of the model named, leave the index,
        in one transaction; the model named is recorded (a local one at once, another at its
        first vectors), so that a run stopped half way resumes with it."""
        kind = provider_kind(provider)
        with transaction(self.conn):
            self.conn.execute("delete from vectors")
            self.conn.execute("delete from index_model")
            self.conn.execute("delete from meta where key glob 'vectors *'")
            if self.conn.execute(
                "select 1 from sqlite_schema where type = 'table' and name = 'embedding_cache'"
            ).fetchone():
                self.conn.execute(
                    "delete from embedding_cache where model_id = ?1"
                    " or substr(model_id, 1, length(?1) + 1) = ?1 || '@'",
                    (provider.model_id,),
                )
            if kind == "local":
                record_model(
                    self.conn,
                    provider.model_id,
                    kind,
                    provider_name(provider),
                    provider.dims,
                    provider.fingerprint,
                )
                self._recorded = True

    def record_model(self, dims: int, provider: Any = None) -> None:
        """Records the embedder's model (or ``provider``'s: a framework store's) as the maker of
        the index's vectors, in the caller's write transaction (where its vectors of ``dims``
        dimensions go in): the first vectors of an index, or a record of schema 5 that had no
        fingerprint. A record of another model, or of another file of the same one, is a
        ModelMismatchError (written since this index was opened, by another process): vectors
        of two models never mix."""
        if provider is None:
            if self._recorded or self.embedder is None:
                return
            provider = self.embedder.provider
        recorded = recorded_model(self.conn)
        check(recorded, provider, False, self.db_path)
        kind = provider_kind(provider)
        fingerprint = provider.fingerprint if kind == "local" else ""
        name = provider_name(provider)
        was = recorded["fingerprint"] if recorded is not None else ""
        if was and fingerprint and was != fingerprint:
            raise ModelMismatchError(
                f"{self.db_path}: this index's vectors were made by another file of the model"
                f" {name} (fingerprint {was}, this one's {fingerprint}): embed every chunk again"
                f" with this one: `hybridsql index DIR --db {self.db_path} --model {name}"
                " --reembed`"
            )
        new = (provider.model_id, kind, name, dims, fingerprint)
        if recorded is None or tuple(recorded.values()) != new:
            record_model(self.conn, *new)
        if self.embedder is not None and provider is self.embedder.provider:
            self._recorded = True

    def close(self, damaged: bool = False) -> None:
        """Closes the database; ``damaged``: without writing to it (see extension.close)."""
        if self.embedder is not None and not damaged and not self.readonly:
            self.embedder.close()  # the cache's copies of what the index now holds
        close(self.conn, damaged)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(damaged=isinstance(exc, DAMAGED))

    def search(self, query: str, **options: Any) -> SearchResults:
        """Hybrid search of the memory files; ``options`` are the fields of SearchOptions."""
        return self.searcher.search(query, SearchOptions(**options), self.documents())

    def chunking(self) -> tuple:
        """(most tokens a chunk holds, tokens it shares with the next, the counter of tokens):
        sized to the embedder's window and counted by its tokenizer when it has them (the
        model's own, for the local model)."""
        provider = self.embedder.provider if self.embedder else None
        window = getattr(provider, "window", None)
        size = min(CHUNK_TOKENS, window - 2) if window else CHUNK_TOKENS
        return size, size // 5, getattr(provider, "count_tokens", None)

    def _tokenizer(self) -> str:
        """Whose tokens chunks are counted in: the embedder's model id, "" for the estimate."""
        provider = self.embedder.provider if self.embedder else None
        return getattr(provider, "model_id", "") if hasattr(provider, "count_tokens") else ""

    def documents(self) -> Profile:
        """The Profile of a search of the memory files (documents)."""
        return document_profile()

    def index_folder(
        self,
        root: str,
        max_file_bytes: int = MAX_FILE_BYTES,
        progress: Progress | None = None,
        report: IndexReport | None = None,
        globs: Sequence[str] | None = None,
        gitignore: bool | None = None,
        changed: Collection[str] | None = None,
    ) -> IndexReport:
        """Indexes the files under ``root`` that ``globs`` match (gitignore patterns; see
        discovery.py) and, when ``gitignore``, no .gitignore leaves out; returns an IndexReport
        (``report``, when given: another thread can watch its counts grow while the run goes).

        The index mirrors the folder under the patterns: files indexed before that they no
        longer match leave it. ``globs`` or ``gitignore`` left as None are those of the folder's
        last run (so the MCP server and extract_memory keep what ``hybridsql index --glob``
        chose), else markdown and True.

        ``changed`` (watch mode) is the set of relative paths that events named: every other
        file indexed before, of the same size and modification time, is taken as unchanged
        without being read."""
        if not os.path.isdir(root):
            raise IndexingError(f"{root} is not a folder")
        if not self.conn.execute(VECTOR_INDEX_LOADED).fetchall():  # an index made before
            raise without_native("no such module: vector_index")
        if self.missing is not None:
            raise EmbeddingError(self.missing)
        if self.embedder is not None and runs_locally(self.embedder.provider):
            # the model file SQL embed() runs, in any client, from now on
            prepare_sql_embed(self.conn)
        started = time.monotonic()
        root = os.path.abspath(root)
        # Names are stored as contents are: undecodable bytes (lone surrogates from os.walk)
        # become U+FFFD; files are still read by their real names.
        stored_root = clean_text(root)
        report = IndexReport() if report is None else report
        report.model = provider_name(self.embedder.provider) if self.embedder else ""
        choice, new_globs = self._choice(stored_root, globs, gitignore)
        report.globs, report.gitignore = choice["globs"], choice["gitignore"]
        vanished: list = []
        passed_over: list = []
        paths = discover(root, vanished, report.globs, report.gitignore, report, passed_over)
        report.skipped += [[clean_text(rel), clean_text(why)] for rel, why in passed_over]
        report.skipped += [[clean_text(rel), VANISHED] for rel in vanished]
        # What was indexed from a folder or a file that cannot be read now stays: it may still
        # be there, unchanged (as a file that cannot be opened, below, does).
        unread = {clean_text(rel) for rel, why in passed_over if why.startswith(UNREADABLE)}
        unread_folders = tuple(
            clean_text(rel) + "/" for rel, why in passed_over if why.startswith(FOLDER_NOT_READ)
        )
        report.files_seen = len(paths)
        known = {
            path: (file_id, sha, (size, mtime))
            for file_id, path, sha, size, mtime in self.conn.execute(
                "select id, path, sha256, size, mtime from files where root = ?", (stored_root,)
            )
        }
        if not paths and known and new_globs:
            # New patterns that match nothing would take every file of the folder out of the
            # index: a mistyped pattern far more often than a wish.
            raise IndexingError(
                f"no file in {root} matches {', '.join(report.globs)}, which would take the"
                f" {plural(len(known), 'file')} indexed from it out of the index; nothing was"
                f" changed. {left_out_line(report) or ''}".rstrip()
            )
        bar = progress or Progress()
        bar.start(len(paths))
        most, overlap, counter = self.chunking()
        was = self._resize(most, self._tokenizer())
        if was is not None:
            if known:
                report.warnings.append([stored_root, f"{was}: every file is chunked again"])
            known = {path: (file_id, "", stat_) for path, (file_id, _, stat_) in known.items()}
        skipped_before = len(report.skipped)
        work = Work(bar, root, paths, known, changed)

        told = threading.Lock()  # the reading thread names each file before it reads it

        def step(label: str) -> None:  # the files finished, counted from the report
            with told:
                finished = report.files_indexed + report.files_unchanged
                bar.update(finished + len(report.skipped) - skipped_before, label)

        chunking = most, overlap, counter
        reader = Reader(root, paths, known, changed, max_file_bytes, chunking, step)
        self._unread = []
        unreadable_before = report.chunks_unreadable
        written_before = report.chunks_written
        try:
            self._pipeline(stored_root, reader, report, step, work)
        finally:
            reader.close()
        self._unreadable_lines(
            stored_root,
            report,
            report.chunks_unreadable - unreadable_before,
            report.chunks_written - written_before,
        )
        seen = {clean_text(p) for p in paths} - {p for p, why in report.skipped if why == VANISHED}
        seen |= unread
        for path, (file_id, _, _) in known.items():
            if path not in seen and not path.startswith(unread_folders):
                with self.conn:
                    self.conn.execute("delete from files where id = ?", (file_id,))
                report.files_deleted += 1

        def embedded(count: int) -> None:
            report.chunks_embedded += count
            step("")

        self.embed_missing(progress=embedded)
        with self.conn:
            self.conn.execute(
                "insert or replace into meta values (?, ?)",
                (f"files {stored_root}", json.dumps(choice)),
            )
        step("")  # the last frame: the run's own counts
        bar.close()
        report.seconds = round(time.monotonic() - started, 3)
        return report

    def _unreadable_lines(self, root: str, report: IndexReport, unreadable: int, written: int):
        """Warnings where a run's chunks, or a file's, are mostly the zero vector (text the
        model cannot read, found by its words alone: windows.py), with the command that reads
        them: the multilingual model. The run's own line, or one a file and then the command."""
        files, self._unread = self._unread, []
        if self.embedder is None or not (files or unreadable * 2 > written > 0):
            return
        name = provider_name(self.embedder.provider)
        multilingual = KNOWN["multilingual-e5-small"]
        fix = ""
        if name != multilingual.name:
            fix = (
                f": for meaning in every language, `hybridsql index {root} --db {self.db_path}"
                f" --model {multilingual.name} --reembed` (pip install"
                f" 'hybridsql[{multilingual.extras}]')"
            )
        if unreadable * 2 > written:
            report.warnings.append(
                [
                    root,
                    f"{unreadable} of {written} chunks are text that {name} cannot read, found by"
                    f" their words alone{fix}",
                ]
            )
            return
        for rel, count, total in files:
            report.warnings.append(
                [rel, f"{count} of {total} chunks are text that {name} cannot read"]
            )
        report.warnings.append(
            [
                root,
                f"{plural(len(files), 'file')} {'is' if len(files) == 1 else 'are'} mostly text"
                f" that {name} cannot read{fix}",
            ]
        )

    def _resize(self, most: int, tokenizer: str):
        """What changed in how chunks are cut (their size, ``most`` tokens, or the tokenizer
        that counts them, ``tokenizer``: a model's id, "" for the estimate), in words, when
        files were indexed, else None; both are recorded.

        They are recorded at once, and in the same transaction every file indexed is marked as
        not yet cut so (its sha256 emptied): a run stopped half way, by Ctrl-C, ``kill -9`` or a
        power cut, resumes with the files it had not reached, and the files of other folders
        are cut again when their folder is next indexed."""
        with transaction(self.conn):
            get = "select value from meta where key = ?"
            was = (self.conn.execute(get, ("chunk_tokens",)).fetchone() or (CHUNK_TOKENS,))[0]
            by = (self.conn.execute(get, ("chunk_tokenizer",)).fetchone() or ("",))[0]
            if was == most and by == tokenizer:
                return None
            self.conn.execute("insert or replace into meta values ('chunk_tokens', ?)", (most,))
            self.conn.execute(
                "insert or replace into meta values ('chunk_tokenizer', ?)", (tokenizer,)
            )
            self.conn.execute("update files set sha256 = ''")
            if self.conn.changes() == 0:
                return None
            if was != most:
                return f"chunks are now cut to {most} tokens, were {was}"
            return f"chunks are now counted in the tokens of {tokenizer or 'an estimate'}"

    def _choice(self, stored_root: str, globs, gitignore) -> tuple:
        """The patterns of a run: those given, else those of the folder's last run (in meta
        under 'files ROOT'), else the defaults; and whether its globs differ from the last's."""
        row = self.conn.execute(
            "select value from meta where key = ?", (f"files {stored_root}",)
        ).fetchone()
        last = json.loads(row[0]) if row else {}
        if globs is not None:
            globs = [globs] if isinstance(globs, str) else list(globs)
            glob_spec(globs)  # a bad pattern is refused before anything is read
        was = last.get("globs", list(DEFAULT_GLOBS))
        choice = {
            "globs": globs if globs is not None else was,
            "gitignore": gitignore if gitignore is not None else last.get("gitignore", True),
        }
        return choice, choice["globs"] != was

    def _pipeline(self, root: str, reader, report, step, work) -> None:
        """Writes the files ``reader`` reads and chunks (in another thread, READ_AHEAD files
        ahead at most), in their order, each in its own transaction once its chunks have
        vectors, so that chunk ids follow the files' order and a search sees every file done.

        Chunks are embedded a batch at a time (the provider's batch size, else EMBED_BATCH; four
        times that for each of the threads of a provider that has them): those found in the
        embedding cache at once, the others by the provider in a thread of its own while this
        one reads the next batch. A batch's vectors are cached as soon as they come back and
        its files written before the next batch is sent: one batch at a time is embedded, and a
        run stopped at any moment loses at most the batch being embedded (never one whose
        vectors came back)."""
        embedder = self.embedder
        provider = embedder.provider if embedder else None
        batch = getattr(provider, "batch_size", None) or EMBED_BATCH
        batch *= 4 * getattr(provider, "threads", 1) if hasattr(provider, "threads") else 1
        waiting: deque = deque()  # files read, in order, not yet written: [file, vectors, left]
        gathered: list = []  # (file entry, chunk number) of the next batch
        computing: Any = None  # the batch the provider has: (entries, {key: text}, keys, found)
        # None without an embedder: then no chunk is gathered, and nothing sent
        worker: Any = Computer(embedder) if embedder else None
        unread = self._unread  # files whose chunks are mostly unreadable by the model

        def write_ready() -> None:
            written = False
            while waiting and not waiting[0][2]:
                (rel, sha, size, mtime, chunks), vectors, _ = waiting.popleft()
                if not self._write_file(root, rel, sha, size, mtime, chunks, vectors):
                    report.files_unchanged += 1  # another run wrote it first
                    work.done(rel, unchanged=True)
                    step(rel)
                    continue
                report.files_indexed += 1
                report.chunks_written += len(chunks)
                unreadable = sum(1 for v in vectors if not v.any())
                report.chunks_unreadable += unreadable
                if vectors and unreadable * 2 > len(vectors):
                    unread.append([rel, unreadable, len(vectors)])
                work.done(rel, tell=False)
                step(rel)
                written = True
            if written:
                work.tell()

        def fill(entries, keys, found) -> None:
            for (entry, i), key in zip(entries, keys, strict=True):
                entry[1][i] = found[key]
                entry[2] -= 1
            report.chunks_embedded += len(entries)

        def send() -> None:  # the batch gathered: vectors from the cache, the rest to embed
            nonlocal gathered, computing
            entries, gathered = gathered[:batch], gathered[batch:]
            texts = [entry[0][4][i].text for entry, i in entries]
            keys, found = embedder.lookup(texts)
            missing = {k: t for k, t in zip(keys, texts, strict=True) if found[k] is None}
            if missing:
                computing = (entries, missing, keys, found)
                worker.send(list(missing.values()))
            else:
                fill(entries, keys, found)
                write_ready()

        def receive() -> None:  # the batch embedded: cached, then its files written
            nonlocal computing
            entries, missing, keys, found = computing
            vectors = worker.receive()
            computing = None  # taken: an error in storing it must not wait for it again
            found.update(embedder.store(missing, vectors))
            fill(entries, keys, found)
            if waiting:
                step(waiting[0][0][0])
            write_ready()

        try:
            for kind, name, got in reader:
                if kind == "skipped":
                    report.skipped.append([name, got])
                    work.done(name, unchanged=True)
                    continue
                report.warnings += [[name, warning] for warning in got[1]]
                if kind == "unchanged":
                    report.files_unchanged += 1
                    work.done(name, unchanged=True)
                    continue
                chunks = got[0][4]
                entry = [got[0], [None] * len(chunks) if embedder else [], len(chunks)]
                if embedder is None:
                    entry[2] = 0
                waiting.append(entry)
                gathered += [(entry, i) for i in range(entry[2])]
                write_ready()  # a file without chunks, or any without an embedder
                while len(gathered) >= batch:
                    if computing is not None:
                        receive()
                    send()
            while computing is not None or gathered:
                if computing is not None:
                    receive()
                if gathered:
                    send()
        except BaseException:
            if computing is not None and worker.local:
                # The model runs in this process: a thread left inside it when Python exits
                # may crash the process (the model freed under it). Its batch is waited
                # for, and cached, so that the next run does not embed it again.
                entries, missing, keys, found = computing
                embedder.store(missing, worker.receive())
            raise
        finally:
            if worker is not None:
                worker.close()

    def _write_file(self, root, rel, sha, size, mtime, chunks, vectors) -> bool:
        """Writes a file's row, chunks and vectors in one transaction; False, writing nothing,
        where the index already holds this content: another run (the watcher's, extract_memory's,
        another process's) wrote it since this run read what was indexed. Written again, its
        chunks would only leave FTS5 their deletions to carry until its next merge."""
        conn = self.conn
        with transaction(conn):
            stored = conn.execute(
                "select sha256 from files where root = ? and path = ?", (root, rel)
            ).fetchone()
            if stored is not None and stored[0] == sha:
                return False
            conn.execute("delete from files where root = ? and path = ?", (root, rel))
            conn.execute(
                "insert into files(root, path, sha256, size, mtime) values (?, ?, ?, ?, ?)",
                (root, rel, sha, size, mtime),
            )
            file_id = conn.last_insert_rowid()
            first = conn.execute("select coalesce(max(id), 0) + 1 from chunks").get
            insert_rows(
                conn,
                "chunks",
                [
                    (first + i, "document", file_id, rel, c.start_line, c.end_line, c.heading)
                    + (c.text, mtime)
                    for i, c in enumerate(chunks)
                ],
            )
            if vectors:
                model = self.embedder.model_id
                self.record_model(len(vectors[0]))
                insert_rows(
                    conn,
                    "vectors",
                    [
                        (first + i, vectors[i].astype("<f4").tobytes(), model, "document")
                        for i in range(len(chunks))
                    ],
                )
        return True

    def embed_missing(
        self, batch: int = EMBED_BATCH, progress: Callable[[int], object] | None = None
    ) -> int:
        """Embeds every chunk that has no vector of the current model; returns how many.
        ``progress(count)`` is told of each batch once it is written."""
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
                self.record_model(vectors.shape[1])
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
            if progress is not None:
                progress(len(rows))


def same_stat(root: str, rel: str, known) -> bool:
    """Whether ``rel``, indexed before as ``known`` (id, sha256, (size, mtime)), has the same
    size and modification time now, and was cut to the current chunk size."""
    if known is None or not known[1]:
        return False
    try:
        info = os.lstat(os.path.join(root, rel))
    except OSError:
        return False
    return (info.st_size, info.st_mtime) == known[2]


# The tables insert_rows writes, and the columns of their rows, in order: every column of chunks
# that the schema names; the others as documents.py (a collection's documents) writes them.
ROW_COLUMNS = {
    "chunks": COLUMNS["chunks"],
    "files": ("id", "root", "path", "sha256", "size", "mtime"),
    "document_metadata": ("file_id", "metadata"),
    "vectors": ("chunk_id", "vector", "model_id", "kind"),
}


def insert_rows(conn: apsw.Connection, table: str, rows: list) -> None:
    """Inserts ``rows`` (tuples of ROW_COLUMNS[table]'s values) into ``table``, up to 500 in one
    statement.

    Not a statement a row. A statement whose rows fire triggers opens a statement savepoint, and
    FTS5 writes the terms it holds in memory to a new segment of its index at each savepoint:
    one statement a row made a segment a chunk, merged again and again. And executemany, which
    runs its statement once a row, hands it back to apsw's statement cache at each run; the
    cache keeps the last 100 handed back, so 1,000 rows pushed every other statement of the
    transaction out of it, each prepared again (its triggers' programs with it) in the next."""
    columns = ROW_COLUMNS[table]
    per = max(1, min(500, conn.limit(apsw.SQLITE_LIMIT_VARIABLE_NUMBER) // len(columns)))
    head = f"insert into {table}({', '.join(columns)}) values "
    one = "(" + ", ".join(["?"] * len(columns)) + ")"
    for start in range(0, len(rows), per):
        part = rows[start : start + per]
        conn.execute(head + ", ".join([one] * len(part)), [v for row in part for v in row])
