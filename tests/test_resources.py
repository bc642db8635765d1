"""Resource bounds: a hostile memory folder is indexed or skipped with a message, in bounded memory.

The folder has a file far over the size limit, files just under it (paragraphs, one line with
no newline at all, one CJK run with no space), many small files, binary files (a PNG, random
bytes, UTF-16), broken UTF-8, a NUL after the binary sniff, deep folders and a symlink loop. The
real ``hybridsql index`` runs on it in a subprocess; its peak RSS is read from wait4().

The suite's folder is small (a 25 MB file, 4 MB files, 2,000 small files); the long run has a
200 MB file, 19.5 MB files and 100,000 small files (HYBRIDSQL_RESOURCES_FULL=1, documented in
docs/reliability.md). Indexing is keyword-only here: the local model's own memory is measured
apart, in docs/reliability.md.
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import apsw
from conftest import HYBRIDSQL

FULL = os.environ.get("HYBRIDSQL_RESOURCES_FULL") == "1"
MB = 2**20
HUGE = 200 * MB if FULL else 25 * MB  # over MAX_FILE_BYTES (20 MB): skipped unread
NEAR = int(19.5 * MB) if FULL else 4 * MB  # under it: indexed
SMALL = 100_000 if FULL else 2_000
RSS_LIMIT_MB = 512 if FULL else 200  # measured: 239 MB and 82 MB
# Under the sanitizer build (LD_PRELOAD of libasan) ASan's quarantine and shadow memory make RSS
# meaningless: it is measured and printed, not bounded.
SANITIZED = "libasan" in os.environ.get("LD_PRELOAD", "")
WORDS = "deploy billing postgres migration ledgerline harbor gateway python tabs spaces".split()


def fill(path, size: int, unit: str) -> None:
    """A text file of exactly ``size`` bytes of ``unit`` repeated (ASCII units only)."""
    with open(path, "w") as f:
        reps, rest = divmod(size, len(unit))
        for _ in range(reps // 10000):
            f.write(unit * 10000)
        f.write(unit * (reps % 10000) + unit[:rest])


def make_folder(root) -> dict:
    """The hostile folder; returns what the index must say about it."""
    rng = random.Random(7)
    os.makedirs(os.path.join(root, "memory"))
    fill(os.path.join(root, "huge.md"), HUGE, "# huge\n\nall work and no play " * 4 + "\n")
    paragraph = "\n## Section\n\n" + " ".join(rng.choice(WORDS) for _ in range(300)) + "\n"
    fill(os.path.join(root, "near-limit.md"), NEAR, paragraph)
    fill(os.path.join(root, "one-line.md"), NEAR, "deploy billing postgres ")
    with open(os.path.join(root, "cjk-run.md"), "w") as f:
        f.write("部署服务数据库迁移" * (NEAR // 27))
    for i in range(SMALL):
        folder = os.path.join(root, "memory", f"d{i // 1000}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"n{i}.md"), "w") as f:
            f.write(f"# note {i}\n\nsmalltoken{i} " + " ".join(rng.sample(WORDS, 5)) + "\n")
    with open(os.path.join(root, "png.md"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + rng.randbytes(5000))
    with open(os.path.join(root, "random.md"), "wb") as f:
        f.write(rng.randbytes(20000))
    with open(os.path.join(root, "utf16.md"), "wb") as f:
        f.write("# utf16\n\ndeploy\n".encode("utf-16"))
    with open(os.path.join(root, "broken.md"), "wb") as f:
        f.write(b"# broken\n\ncaf\xe9 \xff\xfe brokentoken \xc3\x28 end\n")
    with open(os.path.join(root, "late-nul.md"), "wb") as f:
        f.write(b"# late nul\n\n" + b"deploy " * 2000 + b"\x00\x00 latenultoken\n")
    deep = os.path.join(root, *["deep"] * 60)
    os.makedirs(deep)
    with open(os.path.join(deep, "bottom.md"), "w") as f:
        f.write("# bottom\n\ndeeptoken\n")
    os.symlink("..", os.path.join(root, "memory", "loop"))
    return {
        "skipped": {
            "huge.md": "larger than",
            "png.md": "binary",
            "random.md": "binary",
            "utf16.md": "binary",
            "memory/loop": "memory/loop is a symbolic link (links are not followed)",
        },
        "warnings": {"broken.md": "invalid UTF-8"},
        "indexed": SMALL + 6,  # near-limit, one-line, cjk-run, broken, late-nul, bottom
        "tokens": [
            "smalltoken0",
            f"smalltoken{SMALL - 1}",
            "brokentoken",
            "latenultoken",
            "deeptoken",
        ],
    }


# Runs a command and prints its peak RSS. A process forked from this one (pytest, with the local
# model loaded) would count this process's pages in its own ru_maxrss, so the command is
# spawned by a small interpreter, whose wait4() sees the command's peak alone.
MEASURE = (
    "import os, sys\n"
    "pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "print(f'peak_rss_kb {usage.ru_maxrss}', file=sys.stderr)\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def index(root, db, timeout=3600):
    """(report, peak RSS in MB, seconds) of `hybridsql index` on root, killed after timeout."""
    cmd = [sys.executable, "-c", MEASURE, HYBRIDSQL, "index", root, "--db", db]
    started = time.monotonic()
    proc = subprocess.Popen(
        [*cmd, "--embedder", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the command as well as the small interpreter
        proc.communicate()
        raise
    assert proc.returncode == 0, f"exit {proc.returncode}: {err[-2000:]}"
    rss_kb = int(re.search(r"peak_rss_kb (\d+)", err).group(1))
    return json.loads(out), rss_kb / 1024, time.monotonic() - started


def test_a_hostile_folder_is_indexed_or_skipped_in_bounded_memory(tmp_path):
    root, db = str(tmp_path / "folder"), str(tmp_path / "index.db")
    expect = make_folder(root)
    report, rss, seconds = index(root, db)
    skipped = dict(report["skipped"])
    for name, reason in expect["skipped"].items():
        assert reason in skipped.pop(name), name
    assert skipped == {}
    warnings = dict(report["warnings"])
    assert expect["warnings"]["broken.md"] in warnings.pop("broken.md")
    assert warnings == {}
    assert report["files_indexed"] == expect["indexed"]
    conn = apsw.Connection(db)
    assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
    for token in expect["tokens"]:
        assert conn.execute(
            "select count(*) from chunks_fts where chunks_fts match ?", (token,)
        ).fetchone() == (1,), token
    conn.close()
    print(
        f"\n{report['files_seen']} files ({HUGE // MB} MB one skipped, {NEAR / MB:g} MB ones and "
        f"{SMALL} small ones indexed) in {seconds:.1f}s, peak RSS {rss:.0f} MB"
    )
    assert SANITIZED or rss < RSS_LIMIT_MB

    again, rss_again, seconds_again = index(root, db)
    assert again["files_unchanged"] == expect["indexed"] and again["files_indexed"] == 0
    print(f"unchanged: {seconds_again:.1f}s, peak RSS {rss_again:.0f} MB")
    assert SANITIZED or rss_again < RSS_LIMIT_MB


def test_a_named_pipe_is_skipped_not_waited_on(tmp_path):
    """A FIFO called pipe.md is skipped, with its reason, without being opened."""
    root = tmp_path / "folder"
    root.mkdir()
    (root / "ok.md").write_text("# ok\n\nfine\n")
    os.mkfifo(root / "pipe.md")
    report, _, _ = index(str(root), str(tmp_path / "index.db"), timeout=120)
    assert report["files_indexed"] == 1
    assert report["skipped"] == [["pipe.md", "not a regular file (a named pipe)"]]


def test_a_file_name_that_is_not_utf8_is_indexed_or_skipped(tmp_path):
    """caf\\xe9.md, a Latin-1 name from an old archive: os.walk gives a lone surrogate; the
    file is indexed under its name with U+FFFD, and a second run finds it unchanged."""
    root = tmp_path / "folder"
    root.mkdir()
    (root / "ok.md").write_text("# ok\n\nfine\n")
    with open(os.path.join(os.fsencode(root), b"caf\xe9.md"), "w") as f:
        f.write("# latin-1 name\n")
    report, _, _ = index(str(root), str(tmp_path / "index.db"), timeout=120)
    assert report["files_indexed"] == 2
    assert ["caf\ufffd.md", "the file name is not UTF-8"] in report["warnings"]
    again, _, _ = index(str(root), str(tmp_path / "index.db"), timeout=120)
    assert (again["files_unchanged"], again["files_indexed"], again["files_deleted"]) == (2, 0, 0)
