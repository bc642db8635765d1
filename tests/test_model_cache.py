"""The local model's file in the user's cache: written on first use from the installed ONNX
model, read by later processes, written again when the one there cannot be used; a file named
by $HYBRIDSQL_MODEL that cannot be used says so in one line."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from hybridsql.db.extension import cache_dir
from hybridsql.embedding import engine

# A new process embeds two texts with LocalProvider and prints the first numbers of each vector.
EMBED = (
    "from hybridsql.embedding.local_model import LocalProvider\n"
    "vectors = LocalProvider(threads=1).embed(['How do I log in?', 'WAL mode ' * 200])\n"
    "print(' '.join(f'{x:.6f}' for x in vectors[:, :4].ravel()))\n"
)


def run(env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSQL_")}
    return subprocess.run(
        [sys.executable, "-c", EMBED],
        env={**clean, **env},
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # not the checkout: the installed package
        check=False,
    )


def test_the_model_file_is_written_once_then_read(tmp_path):
    cache = tmp_path / "cache"
    first = run({"HYBRIDSQL_CACHE_DIR": str(cache)})
    assert first.returncode == 0, first.stderr
    written = cache / engine.MODEL_FILE
    stamp = written.stat().st_mtime_ns
    second = run({"HYBRIDSQL_CACHE_DIR": str(cache)})
    assert second.stdout == first.stdout and second.stdout.strip()
    assert written.stat().st_mtime_ns == stamp  # read, not written again
    assert sorted(p.name for p in cache.iterdir()) == [engine.MODEL_FILE]


def test_a_damaged_model_file_in_the_cache_is_written_again(tmp_path):
    cache = tmp_path / "cache"
    good = run({"HYBRIDSQL_CACHE_DIR": str(cache)})
    written = cache / engine.MODEL_FILE
    for damage in (b"", written.read_bytes()[:4096]):  # empty, truncated
        written.write_bytes(damage)
        again = run({"HYBRIDSQL_CACHE_DIR": str(cache)})
        assert (again.returncode, again.stdout) == (0, good.stdout), again.stderr
        assert written.stat().st_size > 20_000_000


def test_a_model_file_it_cannot_use_is_one_line(tmp_path):
    named = tmp_path / "named.hsmodel"
    named.write_bytes(b"not a model" * 100)
    done = run({"HYBRIDSQL_CACHE_DIR": str(tmp_path / "cache"), "HYBRIDSQL_MODEL": str(named)})
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hybridsql.errors.EmbeddingError: ") and str(named) in last
    assert not (tmp_path / "cache").exists()  # a file the user named is never replaced
    missing = run({"HYBRIDSQL_MODEL": str(tmp_path / "missing.hsmodel")})
    assert missing.stderr.strip().splitlines()[-1] == (
        f"hybridsql.errors.EmbeddingError: the model file {tmp_path / 'missing.hsmodel'}:"
        " No such file or directory"
    )


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HYBRIDSQL_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("HYBRIDSQL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    platform_dir = {
        "win32": tmp_path / "local" / "hybridsql" / "Cache",
        "darwin": Path.home() / "Library" / "Caches" / "hybridsql",
    }
    assert cache_dir() == platform_dir.get(sys.platform, tmp_path / "xdg" / "hybridsql")


def test_a_cache_folder_that_cannot_be_written_is_passed_over(tmp_path):
    """The model is then made in memory for this process: the same vectors."""
    good = run({"HYBRIDSQL_CACHE_DIR": str(tmp_path / "cache")})
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    done = run({"HYBRIDSQL_CACHE_DIR": str(blocked / "cache")})
    assert (done.returncode, done.stdout) == (0, good.stdout), done.stderr
