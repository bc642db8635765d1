"""Which files a run indexes: --glob patterns, .gitignore files, and what it says it left out."""

import json
import os
import re
import shutil
import socket
import subprocess

import pytest
from conftest import HYBRIDSQL, run_on_tty

from hybridsql.errors import IndexingError
from hybridsql.files.chunking import chunk_markdown
from hybridsql.indexing.index import HybridIndex, IndexReport, discover


def make(root, files):
    """Files under root from {relative path: text or bytes}."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def indexed(idx):
    return [p for (p,) in idx.conn.execute("select path from files order by path")]


def test_patterns_match_at_any_depth_unless_they_have_a_slash(tmp_path):
    root = make(
        tmp_path / "d",
        {"a.txt": "a", "x/y/b.txt": "b", "notes/c.txt": "c", "x/notes/d.txt": "d", "R.MD": "r"},
    )
    assert discover(str(root), globs=["*.txt"]) == [
        "a.txt",
        "notes/c.txt",
        "x/notes/d.txt",
        "x/y/b.txt",
    ]
    assert discover(str(root), globs=["notes/*.txt"]) == ["notes/c.txt"]
    assert discover(str(root), globs=["**/notes/*.txt"]) == ["notes/c.txt", "x/notes/d.txt"]
    assert discover(str(root)) == ["R.MD"]  # the default, markdown, takes any case as before


def test_several_patterns_and_a_negated_one(tmp_path):
    root = make(
        tmp_path / "d",
        {"a.md": "", "b.txt": "", "c.rst": "", "drafts/e.md": "", "x/drafts/f.txt": ""},
    )
    report = IndexReport()
    globs = ["*.md", "*.txt", "!drafts/"]
    assert discover(str(root), globs=globs, report=report) == ["a.md", "b.txt"]
    assert report.left_out["folders_not_matching"] == 2
    assert report.left_out["not_matching"] == {".rst": 1}


def test_nested_gitignore_files_apply_below_their_folder_as_git_does(tmp_path):
    root = make(
        tmp_path / "d",
        {
            ".gitignore": "secret.md\nbuild/\n",
            "a.md": "",
            "secret.md": "",
            "other/secret.md": "",
            "other/x.md": "",
            "build/out.md": "",
            "sub/.gitignore": "*.md\n!keep.md\n",
            "sub/x.md": "",
            "sub/keep.md": "",
            "sub/deeper/y.md": "",
            "sub/deeper/keep.md": "",
            "sub/deeper/.gitignore": "!y.md\n",
        },
    )
    report = IndexReport()
    found = discover(str(root), report=report)
    assert found == ["a.md", "other/x.md", "sub/deeper/keep.md", "sub/deeper/y.md", "sub/keep.md"]
    assert (report.left_out["gitignored_files"], report.left_out["gitignored_folders"]) == (3, 1)
    assert discover(str(root), gitignore=False) == sorted(
        p
        for p in ["a.md", "secret.md", "other/secret.md", "other/x.md", "build/out.md"]
        + ["sub/x.md", "sub/keep.md", "sub/deeper/y.md", "sub/deeper/keep.md"]
    )
    if shutil.which("git"):  # the same files as git's own reading of the same rules
        subprocess.run(["git", "init", "-q", str(root)], check=True, env=dict(os.environ))
        listed = subprocess.run(
            ["git", "ls-files", "--others", "--exclude-standard"],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
            env=dict(os.environ),
        ).stdout.split()
        assert found == sorted(p for p in listed if not p.endswith(".gitignore"))


def test_git_and_hidden_folders_are_not_walked(tmp_path):
    root = make(
        tmp_path / "d",
        {".git/notes.md": "", ".obsidian/w.md": "", "node_modules/m.md": "", "a.md": ""},
    )
    report = IndexReport()
    assert discover(str(root), report=report) == ["a.md"]
    assert report.left_out == {
        "not_matching": {},
        "folders_not_matching": 0,
        "gitignored_files": 0,
        "gitignored_folders": 0,
        "folders_not_walked": 2,  # .git is in every repository: not counted
    }


def test_left_out_counts_by_extension(tmp_path):
    files = {f"t{i}.txt": "t" for i in range(10)}
    files |= {"a.pdf": b"%PDF", "sub/b.PDF": b"%PDF", "Makefile": "all:", "n.md": "# n"}
    root = make(tmp_path / "d", files)
    with HybridIndex(str(tmp_path / "i.db"), embedder="none") as idx:
        report = idx.index_folder(str(root))
    assert report.left_out["not_matching"] == {".txt": 10, ".pdf": 2, "": 1}
    assert (report.globs, report.files_indexed) == (["*.md", "*.markdown"], 1)


def test_changed_patterns_are_remembered_and_the_index_mirrors_them(tmp_path):
    root = make(tmp_path / "d", {"a.md": "# a\n\nalpha\n", "b.txt": "beta\n"})
    with HybridIndex(str(tmp_path / "i.db"), embedder="none") as idx:
        assert idx.index_folder(str(root)).files_indexed == 1
        report = idx.index_folder(str(root), globs=["*.txt"])
        assert (report.files_indexed, report.files_deleted) == (1, 1)
        assert indexed(idx) == ["b.txt"]
        # A run that names no patterns (the MCP server, extract_memory) keeps the last ones.
        report = idx.index_folder(str(root))
        assert (report.globs, report.files_unchanged, report.files_deleted) == (["*.txt"], 1, 0)
        idx.index_folder(str(root), globs=["*.md", "*.txt"])
        assert indexed(idx) == ["a.md", "b.txt"]


def test_a_pattern_that_chooses_nothing_is_refused_before_anything_changes(tmp_path):
    root = make(tmp_path / "d", {"a.md": "# a\n"})
    with HybridIndex(str(tmp_path / "i.db"), embedder="none") as idx:
        idx.index_folder(str(root))
        msg = "no glob pattern chooses any file: give at least one, like '*.md'"
        for globs in ([], ["!a.md"], ["  "]):
            with pytest.raises(IndexingError, match=re.escape(msg)):
                idx.index_folder(str(root), globs=globs)
        assert indexed(idx) == ["a.md"]


def test_new_patterns_that_match_nothing_leave_the_indexed_folder_alone(tmp_path):
    root = make(tmp_path / "d", {"a.md": "# a\n\nalpha\n", "b.md": "# b\n", "c.txt": "c\n"})
    with HybridIndex(str(tmp_path / "i.db"), embedder="none") as idx:
        idx.index_folder(str(root))
        msg = (
            f"no file in {root} matches *.mdx, which would take the 2 files indexed from it out"
            " of the index; nothing was changed. 0 files matched *.mdx; 3 other files (.md 2,"
            " .txt 1): pass --glob '*.md'"
        )
        with pytest.raises(IndexingError, match=re.escape(msg)):
            idx.index_folder(str(root), globs=["*.mdx"])
        assert indexed(idx) == ["a.md", "b.md"]
        assert idx.search("alpha", mode="keyword").results[0].path == "a.md"
        # The folder's own patterns matching nothing is the folder emptied: the index follows.
        for name in ("a.md", "b.md"):
            (root / name).unlink()
        assert idx.index_folder(str(root)).files_deleted == 2
        assert indexed(idx) == []


def test_a_binary_file_a_pattern_takes_is_skipped(tmp_path):
    root = make(
        tmp_path / "d",
        {
            "n.txt": "plain words\n",
            "p.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
            "z.bin": bytes(range(128, 256)) * 4,  # no NUL byte, nor any UTF-8
            "l.txt": "caf\xe9 au lait".encode("latin-1"),  # one bad byte: text
            # tests/test_resources.py's broken.md, 4 bad of 38 characters: text too
            "m.txt": b"# broken\n\ncaf\xe9 \xff\xfe brokentoken \xc3\x28 end\n",
        },
    )
    with HybridIndex(str(tmp_path / "i.db"), embedder="none") as idx:
        report = idx.index_folder(str(root), globs=["*"])
        assert report.skipped == [
            ["p.png", "binary (has NUL bytes)"],
            ["z.bin", "binary (over a quarter of it is not UTF-8)"],
        ]
        assert indexed(idx) == ["l.txt", "m.txt", "n.txt"]


def test_links_are_not_followed_to_files_folders_or_gitignore_files(tmp_path):
    outside = make(tmp_path / "out", {"s.txt": "outsidetoken", "sub/t.txt": "outsidetoken"})
    (outside / "ignore").write_text("a.txt\n")
    root = make(tmp_path / "d", {"a.txt": "insidetoken"})
    os.symlink(outside / "s.txt", root / "s.txt")
    os.symlink(outside / "sub", root / "sub")
    os.symlink(outside / "ignore", root / ".gitignore")
    with HybridIndex(str(tmp_path / "i.db"), embedder="none") as idx:
        report = idx.index_folder(str(root), globs=["*.txt"])
        assert indexed(idx) == ["a.txt"]
        assert report.warnings == [
            [".gitignore", "not read: .gitignore is a symbolic link (links are not followed)"]
        ]


def test_plain_text_is_chunked_by_paragraphs_without_headings(tmp_path):
    text = "# not a heading\n" + "\n\n".join(f"paragraph {i} " + "word " * 60 for i in range(4))
    chunks = chunk_markdown(text, 100, 20, headings=False)
    assert {c.heading for c in chunks} == {""}
    assert [c.start_line for c in chunks] == [1, 4, 6, 8]  # each starts a paragraph
    assert chunk_markdown(text, 100, 20)[0].heading == "not a heading"
    root = make(tmp_path / "d", {"n.py": text})
    with HybridIndex(str(tmp_path / "i.db"), embedder="none") as idx:
        idx.index_folder(str(root), globs=["*.py"])
        found = idx.search("paragraph", mode="keyword")
        assert found.results and {r.heading for r in found} == {""}


def test_the_cli_says_what_a_folder_of_text_files_holds(tmp_path):
    files = {f"t{i}.txt": f"note {i}\n" for i in range(14)}
    make(tmp_path / "d", files | {"s.pdf": b"%PDF", ".gitignore": "t0.txt\n"})
    argv = [HYBRIDSQL, "index", "d", "--db", "i.db", "--embedder", "none"]
    code, out = run_on_tty(argv, tmp_path)
    assert code == 0
    assert out.splitlines()[-1] == (
        "0 files matched *.md, *.markdown; 15 other files (.txt 14, .pdf 1): pass --glob '*.txt'"
    )
    code, out = run_on_tty([*argv, "--glob", "*.txt"], tmp_path)
    assert code == 0
    assert out.splitlines()[-1] == (
        "left out: 1 file not matching --glob (.pdf 1), 1 file ignored by .gitignore"
    )
    piped = subprocess.run(
        [*argv, "--no-gitignore"],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(piped.stdout)
    assert (report["globs"], report["gitignore"], report["files_indexed"]) == (["*.txt"], False, 1)
    assert report["left_out"] == {
        "not_matching": {".pdf": 1, "": 1},  # .gitignore: not read, so a file like others
        "folders_not_matching": 0,
        "gitignored_files": 0,
        "gitignored_folders": 0,
        "folders_not_walked": 0,
    }


LINK = "{} is a symbolic link (links are not followed)"


def test_links_pipes_and_sockets_are_skipped_with_their_reason(tmp_path):
    """Links (to a file, to a folder, to themselves, to their own folder, to nothing), a named
    pipe and a socket that the patterns take: none is read (the pipe would block the run), and
    the run says why of each; a link the patterns do not take is a file not matching."""
    outside = make(tmp_path / "out", {"s.md": "# s\n\noutsidetoken\n", "sub/t.md": "outside"})
    root = make(tmp_path / "d", {"a.md": "# a\n\ninsidetoken\n", "sub/b.md": "# b\n"})
    os.symlink(outside / "s.md", root / "link.md")
    os.symlink(outside / "sub", root / "folderlink")
    os.symlink(root / "sub", root / "sub" / "up")  # a loop, were it followed
    os.symlink("loop.md", root / "loop.md")
    os.symlink(tmp_path / "nowhere.md", root / "dangling.md")
    os.symlink(outside / "s.md", root / "link.txt")
    os.mkfifo(root / "pipe.md")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "sock.md"))
        run = subprocess.run(
            [HYBRIDSQL, "index", "d", "--db", "i.db", "--embedder", "none"],
            cwd=tmp_path,
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=300,  # a deadline: a run that opened the pipe would wait for ever
            check=False,
        )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["skipped"] == [
        ["folderlink", LINK.format("folderlink")],
        ["dangling.md", LINK.format("dangling.md")],
        ["link.md", LINK.format("link.md")],
        ["loop.md", LINK.format("loop.md")],
        ["pipe.md", "not a regular file (a named pipe)"],
        ["sock.md", "not a regular file (a socket)"],
        ["sub/up", LINK.format("sub/up")],
    ]
    assert (report["files_seen"], report["files_indexed"]) == (2, 2)
    assert report["left_out"]["not_matching"] == {".txt": 1}
    code, out = run_on_tty(
        [HYBRIDSQL, "index", "d", "--db", "i.db", "--embedder", "none"], tmp_path
    )
    assert code == 0
    assert out.splitlines()[-7:] == [f"skipped {path}: {why}" for path, why in report["skipped"]]


def without_file_permissions(argv):
    """``argv`` run so that file permissions hold for it: as it is for a user, and for root
    without the capabilities that pass over them (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH)."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): permissions cannot hold")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *argv]


def test_unreadable_folders_and_files_are_skipped_and_stay_indexed(tmp_path):
    """A folder that cannot be listed, one that can be listed but not entered, and a file that
    cannot be opened: each is named with its reason, and what was indexed from them stays (it
    may well still be there); the rest of the folder is indexed as usual."""
    root = make(
        tmp_path / "d",
        {
            "a.md": "# a\n\nalpha\n",
            "locked.md": "# locked\n\nlockedtoken\n",
            "closed/c.md": "# c\n\nclosedtoken\n",
            "listed/l.md": "# l\n\nlistedtoken\n",
        },
    )
    argv = [HYBRIDSQL, "index", "d", "--db", "i.db", "--embedder", "none"]
    first = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=True)
    assert json.loads(first.stdout)["files_indexed"] == 4
    (root / "b.md").write_text("# b\n\nbeta\n")
    os.chmod(root / "locked.md", 0)
    os.chmod(root / "closed", 0)
    os.chmod(root / "listed", 0o444)  # names can be read, not the files' kinds
    try:
        probe = subprocess.run(
            without_file_permissions(["cat", str(root / "locked.md")]), check=False
        )
        assert probe.returncode != 0, "the file is readable: the test would prove nothing"
        run = subprocess.run(
            without_file_permissions(argv),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        for path, mode in (("locked.md", 0o644), ("closed", 0o755), ("listed", 0o755)):
            os.chmod(root / path, mode)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["skipped"] == [
        ["closed", "folder not read: Permission denied"],
        ["listed/l.md", "unreadable: Permission denied"],
        ["locked.md", "unreadable: Permission denied"],
    ]
    assert (report["files_indexed"], report["files_unchanged"], report["files_deleted"]) == (
        1,
        1,
        0,
    )
    with HybridIndex(str(tmp_path / "i.db"), embedder="none") as idx:
        assert indexed(idx) == ["a.md", "b.md", "closed/c.md", "listed/l.md", "locked.md"]


def test_a_folder_that_cannot_be_read_is_refused_in_one_line(tmp_path):
    root = make(tmp_path / "d", {"a.md": "# a\n"})
    os.chmod(root, 0o311)  # entered, not listed
    try:
        run = subprocess.run(
            without_file_permissions(
                [HYBRIDSQL, "index", "d", "--db", "i.db", "--embedder", "none"]
            ),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.chmod(root, 0o755)
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr == f"hybridsql: {root} cannot be read: Permission denied\n"
