"""What a person sees on a terminal (a real pty): lines rather than JSON for every command, bold
query matches unless NO_COLOR, and the indexing bar; the same commands piped print JSON."""

import json
import os
import re
import subprocess

from conftest import EXAMPLES, HYBRIDSQL, run_on_tty

WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d"


def on_tty(tmp_path, *argv, **env):
    """The installed command on a terminal, run in tmp_path: (exit code, what it showed)."""
    return run_on_tty([HYBRIDSQL, *argv], cwd=tmp_path, **env)


def piped(tmp_path, *argv):
    run = subprocess.run(
        [HYBRIDSQL, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ),
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_memory_commands_print_lines_on_a_terminal_and_json_when_piped(tmp_path):
    db = ["--db", str(tmp_path / "m.db"), "--embedder", "none"]
    added = piped(
        tmp_path, "memory", "add", "Maya wants 4 spaces in Python", "--project", "tide", *db
    )
    assert added["content"] == "Maya wants 4 spaces in Python"
    code, shown = on_tty(
        tmp_path, "memory", "add", "Deploys freeze on Fridays", "--project", "tide", *db
    )
    assert code == 0
    assert re.fullmatch(
        rf"memory {added['id'] + 1}  tide · semantic · project · salience 0\.50 · {WHEN}\n"
        r"  Deploys freeze on Fridays\n",
        shown,
    )
    code, shown = on_tty(
        tmp_path, "memory", "search", "spaces", "--no-reinforce", *db, NO_COLOR="1"
    )
    note, *lines = shown.splitlines()
    assert note == "note: no embedding provider is configured: keyword-only search"
    assert code == 0 and len(lines) == 2, shown
    assert re.fullmatch(
        rf"\d\.\d{{3}}  memory {added['id']}  tide · semantic · project · salience 0\.50 · {WHEN}"
        r"  \[keyword: vector -, keyword 1\.000\]",
        lines[0],
    )
    assert lines[1] == "       Maya wants 4 spaces in Python"  # NO_COLOR: the match not bold
    code, shown = on_tty(tmp_path, "memory", "recent", "--project", "tide", *db)
    assert code == 0 and [line[:8] for line in shown.splitlines() if "memory" in line] == [
        "→ +0  me",
        "  -1  me",
    ]
    code, shown = on_tty(tmp_path, "memory", "session", "start", "--project", "tide", *db)
    assert re.fullmatch(rf"session 1  tide, started {WHEN}, open\n", shown)
    code, shown = on_tty(tmp_path, "memory", "delete", str(added["id"]), *db)
    assert shown == f"memory {added['id']} deleted\n"


def test_matches_are_bold_unless_no_color(tmp_path):
    db = ["--db", str(tmp_path / "m.db"), "--embedder", "none"]
    piped(tmp_path, "index", EXAMPLES, *db)
    code, bold = on_tty(tmp_path, "search", "staging", *db, "-n", "1")
    assert code == 0 and "\x1b[1mstaging\x1b[0m" in bold.lower()
    code, plain = on_tty(tmp_path, "search", "staging", *db, "-n", "1", NO_COLOR="1")
    assert code == 0 and "\x1b[" not in plain and "staging" in plain.lower()
    assert re.sub(r"\x1b\[[01]m", "", bold) == plain


def test_index_shows_a_bar_of_files_and_chunks_on_a_terminal(tmp_path):
    code, shown = on_tty(tmp_path, "index", EXAMPLES, "--db", "m.db", "--embedder", "none")
    assert code == 0
    files = len([f for _, _, fs in os.walk(EXAMPLES) for f in fs if f.endswith(".md")])
    assert re.search(rf"indexing  \[#+\]  {files}/{files}  0 chunks embedded", shown), shown
    assert re.search(rf"^{files} files: {files} indexed, ", shown, re.MULTILINE), shown
