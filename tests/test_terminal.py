"""What a person sees on a terminal (a real pty): lines rather than JSON for every command, bold
query matches unless NO_COLOR, and the indexing bar; the same commands piped print JSON."""

import json
import os
import re
import shutil
import subprocess
from itertools import pairwise

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


def frames(shown):
    """(files done, files, chunks embedded) of each frame the indexing bar drew."""
    found = re.findall(r"indexing  \[[#-]+\]  (\d+)/(\d+)  (\d+) chunks embedded", shown)
    return [tuple(map(int, frame)) for frame in found]


def test_index_shows_a_bar_of_files_and_chunks_on_a_terminal(tmp_path):
    code, shown = on_tty(tmp_path, "index", EXAMPLES, "--db", "m.db", "--embedder", "none")
    assert code == 0
    files = len([f for _, _, fs in os.walk(EXAMPLES) for f in fs if f.endswith(".md")])
    assert frames(shown)[-1] == (files, files, 0), shown
    assert re.search(rf"^{files} files: {files} indexed, ", shown, re.MULTILINE), shown


def test_the_bar_counts_what_is_done_as_it_is_done_and_ends_on_the_summary(tmp_path):
    """The bar's counts are the run's: files count once written (or found unchanged or
    skipped), chunks once embedded, both growing through the run, a provider's batch at a
    time, and its last frame says what the summary says. (Its chunks once lagged the summary,
    913 for 976, and stood at 0 until the end on a small folder.)"""
    notes = tmp_path / "notes"
    shutil.copytree(os.path.join(EXAMPLES, "memory"), notes)
    (notes / "broken.md").symlink_to(notes / "nowhere.md")
    code, shown = on_tty(tmp_path, "index", "notes", "--db", "m.db", "--embedder", "local")
    assert code == 0, shown
    summary = re.search(
        r"^(\d+) files: (\d+) indexed, 0 unchanged, 0 deleted; (\d+) chunks written, (\d+) "
        r"embedded in [\d.]+s$",
        shown,
        re.MULTILINE,
    )
    assert summary, shown
    seen, indexed, written, embedded = map(int, summary.groups())
    assert seen == indexed and written == embedded > 16  # more than one batch of the model's
    drawn = frames(shown)
    assert drawn[-1] == (seen, seen, embedded), drawn
    assert all(a[0] <= b[0] and a[2] <= b[2] for a, b in pairwise(drawn)), drawn
    middle = {chunks for done, _, chunks in drawn if 0 < chunks < embedded and done < seen}
    assert len(middle) >= 2, drawn  # chunks embedded before the last file was written


# A file name that, printed raw, would end its result line and forge another one, then names
# with each other kind of line break, an escape sequence and a right-to-left override.
FORGED = "a.md:1-3  [keyword: vector -, keyword 1.000, decay 1.00]\n0.999  forged.md"
NAMES = [
    FORGED + ".md",
    "cr\rreturn.md",
    "esc\x1b[2Jclear.md",
    "line\u2028sep.md",
    "para\u2029sep.md",
    "rtl\u202edm.txt.md",
    "nel\x85next.md",
]
# What the command itself writes: bold on and off, the bar's hiding and showing of the cursor,
# and its redrawing of its line (\r). Anything else of C0, C1, U+2028/9 or a bidi control
# would be the file's.
OURS = re.compile(r"\x1b\[([01]m|\?25[lh])|\r(?!\n)")
RAW = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def escaped(name):
    return "".join(
        c if not RAW.match(c) else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
        for c in name
    )


def terminal_lines(shown):
    """What a person reads, line by line, once the command's own sequences are taken out; each
    line must be free of any other control character."""
    lines = OURS.sub("", shown).split("\n")
    for line in lines:
        assert not RAW.search(line), repr(line)
    return lines


def test_control_characters_in_file_names_and_texts_stay_on_their_line(tmp_path):
    """A newline in a file name printed raw split a search result's line in two, and the second
    looked like a result of its own: every control character is escaped on every line that
    shows a file name or text, and texts with line breaks are shown on lines of their own."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for name in NAMES:
        (folder / name).write_text("# note\n\ncrafttoken appears here\n")
    os.symlink(folder / NAMES[1], folder / "link\nforged.md")
    db = ["--db", str(tmp_path / "m.db"), "--embedder", "none"]
    code, shown = on_tty(tmp_path, "index", "notes", *db)
    assert code == 0, shown
    lines = terminal_lines(shown)
    assert (
        "skipped link\\x0aforged.md: link\\x0aforged.md is a symbolic link (links are not followed)"
        in lines
    )
    code, shown = on_tty(tmp_path, "search", "crafttoken", *db, "-n", "20", NO_COLOR="1")
    assert code == 0
    lines = terminal_lines(shown)
    results = [re.fullmatch(r"\d\.\d{3}  (.*):\d+-\d+  \[keyword: .*\]", line) for line in lines]
    assert sorted(r.group(1) for r in results if r) == sorted(escaped(name) for name in NAMES)
    assert not [line for line in lines if line.startswith("0.999  forged")]
    assert len(lines) == 1 + 2 * len(NAMES) + 1  # the note, two lines a result, the end

    content = "first line\nsecond\u2028third\x1b[2J\r\nfourth\u202e"
    code, shown = on_tty(tmp_path, "memory", "add", content, "--project", "p\nq", *db)
    assert code == 0
    head, *body, end = terminal_lines(shown)
    assert re.match(r"memory \d+  p\\x0aq · semantic · ", head) and end == "", head
    assert body == ["  first line", "  second", "  third\\x1b[2J", "  fourth\\u202e"]
    code, shown = on_tty(tmp_path, "memory", "recent", "--project", "p\nq", *db)
    assert terminal_lines(shown)[1] == "       first line second third\\x1b[2J fourth\\u202e"
    code, shown = on_tty(tmp_path, "memory", "search", "second", "--project", "p\nq", *db)
    assert len(terminal_lines(shown)) == 4  # the note, the hit and its snippet, the end

    missing = tmp_path / "no\nsuch"
    for way in (on_tty, run_piped):
        code, shown = way(tmp_path, "index", str(missing), *db)
        assert (code, shown) == (1, f"hybridsql: {escaped(str(missing))} is not a folder\n")


def run_piped(tmp_path, *argv):
    """(exit code, stderr) of the command with its output piped."""
    run = subprocess.run(
        [HYBRIDSQL, *argv], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    return run.returncode, run.stderr


def test_time_left_is_reckoned_from_the_first_work_done_not_the_start():
    """A run that spends 10 s loading the model, then does 10 % of its bytes every second: from
    the second file on, the bar says exactly the time that is left (the load is not counted)."""
    from hybridsql.terminal import Eta

    now = [0.0]
    eta = Eta(clock=lambda: now[0])
    eta.work(0, 1000)
    assert eta.left() is None  # nothing done yet
    now[0] = 11.0
    eta.work(100, 1000)
    assert eta.left() is None  # one reading: no rate yet
    for second in range(2, 10):
        now[0] = 10.0 + second
        eta.work(100 * second, 1000)
        assert eta.left() == 10 - second
    now[0] = 20.0
    eta.work(1000, 1000)
    assert eta.left() is None  # all done


def test_time_left_ignores_files_found_unchanged():
    """Unchanged files leave the total (Progress.work): the rate counts only work done."""
    from hybridsql.terminal import Eta

    now = [0.0]
    eta = Eta(clock=lambda: now[0])
    eta.work(50, 500)
    now[0] = 5.0
    eta.work(100, 300)  # 50 bytes in 5 s; 200 left
    assert eta.left() == 20.0


def test_a_keyword_result_with_a_vector_says_why_it_is_no_vector_match(tmp_path, example_db):
    """A result its words alone found (``keyword``) still shows its vector's cosine: it said
    `[keyword: vector 0.232, ...]`, which reads as a vector match mislabelled. Its cosine was
    under the vector floor (0.25), below which a vector counts as noise: the line says so."""
    argv = ("search", "deploy", "--db", example_db, "--now", "2026-11-22")
    results = piped(tmp_path, *argv)["results"]
    under = [r for r in results if r["match_type"] == "keyword" and r["vector_score"] is not None]
    assert under and all(r["vector_score"] < 0.25 for r in under)
    code, shown = on_tty(tmp_path, *argv, NO_COLOR="1")
    assert code == 0
    keyword_lines = [line for line in shown.splitlines() if "[keyword: " in line]
    assert len(keyword_lines) == len(under)
    for r, line in zip(under, keyword_lines, strict=True):
        assert f"[keyword: vector {r['vector_score']:.3f} under the vector floor 0.25, " in line
    code, shown = on_tty(tmp_path, *argv, "--vector-floor", "0.05", NO_COLOR="1")
    assert f"vector {under[0]['vector_score']:.3f} under the vector floor 0.05" not in shown


def test_a_keyword_result_past_the_pool_says_so():
    """The other reason a result with a vector is no vector match: its cosine passed the floor
    but it was not among the candidate_pool nearest (the vector side's candidates)."""
    from hybridsql import SearchOptions
    from hybridsql.terminal import document_lines

    result = {
        "kind": "document",
        "path": "a.md",
        "start_line": 1,
        "end_line": 2,
        "other_ranges": [],
        "score": 0.5,
        "match_type": "keyword",
        "vector_score": 0.4,
        "keyword_score": 1.0,
        "decay": 1.0,
        "snippet": "a",
    }
    (line, _) = document_lines([result], [], SearchOptions(candidate_pool=20, vector_floor=0.25))
    assert (
        line
        == "0.500  a.md:1-2  [keyword: vector 0.400 not among the 20 nearest, keyword 1.000, decay 1.00]"
    )
    # Options that do not say the floor (it is the model's, which a search fills in): the line
    # cannot tell which of the two it is, and says both rather than guess.
    (line, _) = document_lines([result], [], SearchOptions(candidate_pool=20))
    assert "vector 0.400 under the vector floor or not among the 20 nearest," in line
    both = {**result, "match_type": "both"}
    (line, _) = document_lines([both], [], SearchOptions(candidate_pool=20))
    assert "[both: vector 0.400, keyword 1.000, decay 1.00]" in line
