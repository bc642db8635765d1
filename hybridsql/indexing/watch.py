"""Keeping an index in step with its folder: ``hybridsql index DIR --watch`` and the MCP servers'
memory folder.

The file system's own events (inotify, FSEvents, ReadDirectoryChangesW, through watchfiles'
Rust ``notify``) wake the watcher; nothing scans the tree while the folder is quiet. Events
are gathered into one batch until none has come for ``STEP_MS`` (a ``git checkout`` of
hundreds of files, an editor's write-then-rename save), and a batch is one incremental run of
``index_folder``: the folder is walked again (what ``.gitignore`` files and the globs choose
may have changed), the files that events named are read again, and every other file indexed
before with the same size and modification time is taken as unchanged without being read.
A moved file is a new path whose chunks are already in the embedding cache: nothing is
embedded again. A file that vanishes before it is read leaves the index.
"""

import os
import threading
import time
from dataclasses import dataclass

from watchfiles._rust_notify import RustNotify  # documented: watchfiles' "Rust backend"

from hybridsql.files.discovery import MAX_FILE_BYTES, SKIP_DIRS, glob_spec
from hybridsql.indexing.index import HybridIndex, IndexReport, Progress

STEP_MS = 200  # a batch is sent once no event has come for this long
DEBOUNCE_MS = 1600  # the longest one wait for events gathers; a longer burst is merged on
MOST_GATHERING_S = 30.0  # ... until a burst has lasted this long
MERGE_LOOK_MS = 50  # how long a batch waits for a burst's next events before it runs


class Stopped(Exception):
    """Watching was asked to stop while a batch ran: it stops before its next file."""


class Stoppable(Progress):
    """Passes progress on to ``inner`` and stops the run (Stopped) between files once ``stop``
    is set."""

    def __init__(self, stop: threading.Event, inner: Progress | None = None):
        self.stop = stop
        self.inner = inner or Progress()

    def start(self, total: int) -> None:
        self.inner.start(total)

    def update(self, done: int, label: str) -> None:
        if self.stop.is_set():
            raise Stopped
        self.inner.update(done, label)

    def work(self, done: int, total: int) -> None:
        self.inner.work(done, total)

    def close(self) -> None:
        self.inner.close()


@dataclass
class WatchReport:
    """What a watch did after its first run, for the line said when it stops."""

    folder: str = ""
    seconds: float = 0.0
    batches: int = 0
    files_indexed: int = 0
    files_deleted: int = 0
    chunks_embedded: int = 0
    failures: int = 0


def relative(root: str, path: str) -> str | None:
    """``path`` below ``root`` as a '/'-separated relative path; None for the root itself and
    for what is never indexed (inside a hidden folder, node_modules, __pycache__)."""
    rel = os.path.relpath(path, root)
    if rel == "." or rel.startswith(".." + os.sep):
        return None
    parts = rel.split(os.sep)
    if any(p.startswith(".") or p in SKIP_DIRS for p in parts[:-1]):
        return None
    return "/".join(parts)


def worth_a_run(index: HybridIndex, root: str, stored_root: str, spec, rel: str) -> bool:
    """Whether an event at ``rel`` may change the index: a file the globs take, a .gitignore, a
    folder, or a path under which files were indexed (a folder moved or deleted). An editor's
    swap and backup files, and what no pattern takes, wake nothing."""
    if spec.match_file(rel.lower()) or rel.rsplit("/", 1)[-1] == ".gitignore":
        return True
    if os.path.isdir(os.path.join(root, rel)):
        return True
    row = index.conn.execute(
        "select 1 from files where root = ? and path > ? and path < ? limit 1",
        (stored_root, rel + "/", rel + "0"),  # '0' follows '/'
    ).fetchone()
    return row is not None


def gather(watcher: RustNotify, stop: threading.Event):
    """The next batch of changed paths: the events of one wait, and of more waits while events
    keep coming (up to MOST_GATHERING_S); None once ``stop`` is set or a signal came."""
    changes = watcher.watch(DEBOUNCE_MS, STEP_MS, 0, stop)
    if not isinstance(changes, set):
        return None
    started = time.monotonic()
    paths = {path for _, path in changes}
    while time.monotonic() - started < MOST_GATHERING_S:
        # Only a wait that DEBOUNCE_MS cut short has more events right behind it: one that
        # ended in STEP_MS of quiet gets nothing in this short look.
        more = watcher.watch(DEBOUNCE_MS, STEP_MS, MERGE_LOOK_MS, stop)
        if more == "timeout":
            break
        if not isinstance(more, set):
            return None
        paths |= {path for _, path in more}
    return paths


def watch_folder(
    index: HybridIndex,
    root: str,
    stop: threading.Event,
    progress: Progress | None = None,
    report: IndexReport | None = None,
    globs=None,
    gitignore: bool | None = None,
    on_ready=None,
    on_batch=None,
    on_failure=None,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> WatchReport:
    """Indexes ``root`` (as index_folder does, with ``progress``, ``report``, ``globs``,
    ``gitignore`` and ``max_file_bytes``, the largest file it indexes), then keeps the index in
    step with it until ``stop`` is set.

    The watcher starts before the first run, so nothing changed during it is missed.
    ``on_ready(report)`` is called after the first run, ``on_batch(report)`` after each batch
    (an IndexReport each), ``on_failure(error)`` when a batch failed with a HybridSQLError (the
    files it did not write are read again by the next batch: their size or time differs).
    A ``progress`` that raises Stopped (Stoppable) ends the watch between two files."""
    from hybridsql.errors import HybridSQLError
    from hybridsql.search import clean_text

    root = os.path.abspath(root)
    stored_root = clean_text(root)
    watched = WatchReport(folder=stored_root)
    started = time.monotonic()
    with RustNotify([root], False, False, 0, True, True) as watcher:
        try:
            first = index.index_folder(
                root,
                max_file_bytes,
                progress=progress,
                report=report,
                globs=globs,
                gitignore=gitignore,
            )
            if on_ready is not None:
                on_ready(first)
            spec = glob_spec(first.globs)
            started = time.monotonic()
            while True:
                paths = gather(watcher, stop)
                if paths is None:
                    break
                changed = {rel for rel in (relative(root, p) for p in paths) if rel}
                if not any(worth_a_run(index, root, stored_root, spec, rel) for rel in changed):
                    continue
                batch = IndexReport()
                try:
                    index.index_folder(
                        root, max_file_bytes, progress=progress, report=batch, changed=changed
                    )
                except HybridSQLError as e:
                    watched.failures += 1
                    if on_failure is not None:
                        on_failure(e)
                    continue
                spec = glob_spec(batch.globs)
                watched.batches += 1
                watched.files_indexed += batch.files_indexed
                watched.files_deleted += batch.files_deleted
                watched.chunks_embedded += batch.chunks_embedded
                if on_batch is not None:
                    on_batch(batch)
        except Stopped:
            pass
        finally:
            watched.seconds = round(time.monotonic() - started, 3)
    return watched
