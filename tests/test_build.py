"""Building: what a user without a C compiler sees, what a wheel is tagged, the library zig
cross-compiles for each release platform (scripts/platforms.py), and the sdist."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

import hybridsql
from hybridsql.db import _native
from hybridsql.db.extension import loadable_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import platforms  # noqa: E402 (scripts/ is not a package)

EXPORTS = platforms.exports()


@pytest.mark.parametrize(
    ("cc", "named"),
    [(None, None), ("false", "false"), ("gcc -fno-such-flag", "gcc -fno-such-flag")],
)
def test_a_build_without_a_compiler_says_so_first(tmp_path, cc, named):
    """No compiler on PATH, or one that compiles nothing (``CC=false``, which is on PATH): one
    message naming the platforms with wheels and what to install, before setuptools prints
    anything, and no traceback. Without CC, the compiler named is the one this Python was built
    with (sysconfig's CC: ``gcc`` for pyenv's, ``x86_64-linux-gnu-gcc`` for Debian's)."""
    if named is None:
        named = shlex.split(sysconfig.get_config_var("CC") or "cc")[0]
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(sys.executable, bare / "python")
    env = {"PATH": str(bare), "HOME": str(tmp_path)}
    if cc is not None:
        for program in ("false", "gcc"):
            os.symlink(shutil.which(program), bare / program)
        env["CC"] = cc
    proc = subprocess.run(
        [str(bare / "python"), "setup.py", "bdist_wheel"],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == (
        f"hybridsql: no working C compiler was found ({named!r}), and there is no prebuilt wheel"
        " for"
    )
    assert "Linux x86_64 and aarch64" in proc.stderr and "Windows x86_64" in proc.stderr
    assert "apt-get install gcc" in proc.stderr and "Traceback" not in proc.stderr


def test_the_wheel_serves_every_python_of_its_platform(tmp_path):
    """The library has no Python in it, so the wheel is py3-none-<platform>, not cpXY; it
    carries py.typed, so type checkers read the package's hints (PEP 561)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), ROOT],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = os.listdir(tmp_path)
    assert wheel.startswith(f"hybridsql-{hybridsql.__version__}-py3-none-linux_")
    assert wheel.endswith(".whl")
    with zipfile.ZipFile(tmp_path / wheel) as built:
        assert built.read("hybridsql/py.typed") == b""


def test_the_tests_import_the_installed_package():
    """pytest from the repository root imports the installed hybridsql (the wheel's, in CI),
    not the source folder beside it, which has no library."""
    installed = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    assert os.path.dirname(os.path.dirname(hybridsql.__file__)) in installed
    assert os.path.exists(loadable_path())


# What each target's library says of itself: file format, CPU, minimum OS, what it loads.
LIBRARIES = {
    "linux-x86_64": ("ELF", "x86_64", "glibc 2.14", ("libc.so.6", "libm.so.6")),
    "linux-aarch64": ("ELF", "aarch64", "glibc 2.17", ("libc.so.6", "libm.so.6")),
    "musllinux-x86_64": ("ELF", "x86_64", "musl", ("libc.musl-x86_64.so.1",)),
    "musllinux-aarch64": ("ELF", "aarch64", "musl", ("libc.musl-aarch64.so.1",)),
    "macos-x86_64": ("Mach-O", "x86_64", "macOS 10.13", ("/usr/lib/libSystem.B.dylib",)),
    "macos-arm64": ("Mach-O", "aarch64", "macOS 11.0", ("/usr/lib/libSystem.B.dylib",)),
    # KERNEL32 and those parts of the Universal C Runtime that the code calls
    "windows-x86_64": ("PE", "x86_64", "Windows", None),
}


@pytest.mark.parametrize("target", platforms.TARGETS, ids=lambda t: t.name)
def test_each_platform_library_is_built_and_checked(target, tmp_path):
    """zig cross-compiles the library for each release target: the right format, CPU and
    minimum OS, the entry point and the kernels exported and nothing else, only the system's
    C library loaded; and nothing but the library is left beside it."""
    path = platforms.build_library(target, str(tmp_path))
    assert os.listdir(tmp_path) == [target.library]
    lib = platforms.check_library(target, path)
    fmt, arch, min_os, needs = LIBRARIES[target.name]
    assert (lib.format, lib.arch, lib.min_os) == (fmt, arch, min_os)
    if needs is None:
        assert lib.needs[0] == "KERNEL32.dll"
        assert all(re.fullmatch(r"api-ms-win-crt-[a-z]+-l1-1-0\.dll", n) for n in lib.needs[1:])
    else:
        assert lib.needs == needs
    assert lib.exports == EXPORTS


def test_each_archives_note_names_the_minimum_os_docs_platforms_names():
    """The note in each library's archive says the oldest OS the build targets (zig's triple),
    as docs/platforms.md's table does: glibc 2.17 for Linux, not the newest glibc symbol the
    x86_64 library happens to use (2.14)."""
    with open(os.path.join(ROOT, "docs", "platforms.md"), encoding="utf-8") as f:
        rows = re.findall(r"^\| [^|]+ \| `(\w+)` \| ([^|]+) \|", f.read(), re.MULTILINE)
    documented = dict(rows)
    assert len(documented) == len(platforms.TARGETS)
    for t in platforms.TARGETS:
        note = platforms.archive_note(t, "0.1.0", "abc1234")
        (minimum,) = re.findall(r"^Minimum: (.+)\.$", note, re.MULTILINE)
        assert minimum == t.minimum
        if t.name != "windows-x86_64":  # the page says what CPython needs there
            assert documented[t.wheel] == minimum, t.name
    assert platforms.target("linux-x86_64").minimum == "glibc 2.17"


def test_a_library_for_another_platform_fails_the_check(tmp_path):
    """The check is what build-dist relies on: a library of the wrong platform stops it."""
    path = platforms.build_library(platforms.target("linux-x86_64"), str(tmp_path))
    mac = platforms.target("macos-arm64")
    msg = (
        f"macos-arm64 library {path}: is ELF for x86_64, expected Mach-O for aarch64; "
        "has minimum OS 'glibc 2.14', expected 'macOS 11.0'; "
        "loads libraries that are not the system's: ['libc.so.6', 'libm.so.6']"
    )
    with pytest.raises(platforms.CheckError, match=re.escape(msg)):
        platforms.check_library(mac, path)


def test_a_wine_prefix_that_cannot_be_made_says_why_and_is_removed(tmp_path, monkeypatch):
    """wine's prefix is made once, 700 MB of DLLs; where the disk fills up first, wineboot exits
    53 with a line on standard error that nobody saw (CI's platforms stage failed so). The
    failure names wineboot, its exit, its last line and the space left; the wine server is
    stopped while its prefix is still there (wine finds a server by its prefix), then the
    half-made prefix is removed, so that the next run makes it anew. Stand-ins for wine's
    programs, on PATH, fail as a full disk makes the real ones fail."""
    programs = tmp_path / "bin"
    programs.mkdir()
    calls = tmp_path / "wineserver-calls"
    (programs / "wineserver").write_text(
        "#!/bin/sh\n"
        f'[ -d "$WINEPREFIX" ] && there=present || there=gone; echo "$1 $there" >> {calls}\n'
    )
    (programs / "wineboot").write_text(
        "#!/bin/sh\n"
        'mkdir -p "$WINEPREFIX/drive_c/windows/system32" && : > "$WINEPREFIX/system.reg"\n'
        "echo 'wine: configuration in L\"'$WINEPREFIX'\" has been updated.' >&2\n"
        "echo 'wine: could not load kernel32.dll, status c0000135' >&2\n"
        "exit 53\n"
    )
    for program in ("wineserver", "wineboot"):
        (programs / program).chmod(0o755)
    monkeypatch.setenv("PATH", f"{programs}{os.pathsep}{os.environ['PATH']}")
    cache = tmp_path / "cache"
    prefix = str(cache / "wine")
    entered = []
    with pytest.raises(RuntimeError) as failed, platforms.wine_server(str(cache)):
        entered.append(True)
    said = str(failed.value)
    assert said.startswith(
        f"wineboot --init failed (exit 53) making wine's prefix {prefix}: "
        "wine: could not load kernel32.dll, status c0000135; "
    ), said
    assert re.search(r"; \d+ MB free there, and a prefix takes about 700 MB$", said), said
    assert "\n" not in said
    assert not entered and not os.path.exists(prefix)
    assert calls.read_text().splitlines() == ["--persistent present", "--kill present"]


def test_the_exports_are_those_of_the_header():
    """What the checks demand: SQLite's entry point and the kernels _native.py declares."""
    assert EXPORTS == (
        "hs_cosine",
        "hs_first_nonfinite",
        "hs_model_dims",
        "hs_model_embed",
        "hs_model_embed_ids",
        "hs_model_free",
        "hs_model_header",
        "hs_model_id",
        "hs_model_open",
        "hs_model_simd",
        "hs_model_tokens",
        "hs_model_window",
        "hs_readable_share",
        "hs_simd_path",
        "hs_tokenize",
        "hs_tokenizer_free",
        "hs_tokenizer_id",
        "hs_tokenizer_ids",
        "hs_tokenizer_open",
        "hs_tokenizer_readable",
        "hs_tokenizer_size",
        "hs_tokenizer_special",
        "hs_vocab_free",
        "hs_vocab_id",
        "hs_vocab_new",
        "sqlite3_hybridsql_init",
    )
    declared = re.findall(r"(\w+)\(", _native.CDEF)
    assert sorted([*declared, "sqlite3_hybridsql_init"]) == list(EXPORTS)


def test_the_sdist_builds_and_installs_from_source(tmp_path):
    """The sdist carries what a build from source needs (csrc/ with SQLite's headers): pip
    compiles it with the system compiler, and the library it makes loads in the sqlite3 shell."""
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "-o", str(tmp_path / "sdist"), ROOT],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (sdist,) = os.listdir(tmp_path / "sdist")
    assert sdist == f"hybridsql-{hybridsql.__version__}.tar.gz"
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
        + [str(tmp_path / "sdist" / sdist)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    library = site / "hybridsql" / "hybridsql.so"
    assert platforms.inspect_library(str(library)).exports == EXPORTS
    shell = subprocess.run(
        ["sqlite3", ":memory:", f".load {library}", "select hybridsql_version()"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.stdout == f"{hybridsql.__version__}\n"


# What the amalgamation and the library are asked, in the sqlite3 shell: every way into the
# extension that needs no model file, errors included (the shell goes on after one).
SESSION = """
select name, narg, flags from pragma_function_list order by name, narg, flags;
select cosine_similarity('[1,0]', '[1,1]'), bm25_score(-4.2), hybrid_score(0.8, -4.2, 0.6, 0.4);
select temporal_decay('memory/2026-10-22.md', '2026-11-21'), vector_json(vector_blob('[0.1, 2]'));
select hybridsql_version(), hybridsql_simd(), embed(null);
with recursive n(i) as (select 1 union all select i + 1 from n where i < 40)
select cosine_topk('[1, 0.5, 0]', 5, i, json_array(i % 7, i % 3, 1)) from n;
select cosine_similarity('[1]', '[1, 2]');
select cosine_topk('[1]', 0, 1, '[1]');
select temporal_decay('a.md', 'yesterday');
create virtual table v using vector_index(e float[3], p text partition key, m integer, t text);
with recursive n(i) as (select 1 union all select i + 1 from n where i < 300)
insert into v(rowid, e, p, m, t)
select i, json_array(i % 11, i % 5 - 2, i % 3), char(97 + i % 3), i % 10, 'r' || i from n;
select rowid, score from v where e match '[1, 0, 1]' and k = 5 and p = 'a' and m > 3;
select rowid, round(score, 12) from v where e match '[3, -1, 2]' order by score desc limit 4;
update v set e = '[9, 9, 9]', m = 99 where rowid = 17;
update v set p = 'c' where rowid = 18;
delete from v where rowid in (20, 21, 22) or m = 4;
select count(*), sum(m) from v;
select rowid, score, m, p from v where e match '[9, 9, 9]' and k = 3;
select rowid from v where e match '[1, 0, 0]' and k = 2 and t like 'r1%';
insert into v(rowid, e, p) values (1, '[1, 2, 3]', 'a');
insert into v(e, p) values ('[1, 2]', 'a');
create virtual table f using fts5(x);
insert into f values ('tabs or spaces'), ('tabs tabs'), ('spaces only'), ('neither');
select rowid, rank from (select rowid, bm25_candidate(f, 2) as rank from f where f match 'tabs OR spaces')
where rank is not null order by rank limit 2;
"""


def test_the_amalgamation_is_the_library(tmp_path):
    """scripts/amalgamate.py's one C file compiles without a warning into a library that exports
    what the library does, defines no other global symbol (sqlite3_api aside), and answers a
    session of every SQL function, vector_index's reads and writes and their errors byte for
    byte as the library does."""
    source = tmp_path / "hybridsql.c"
    subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "amalgamate.py"), str(source)], check=True
    )
    built = tmp_path / "lib"
    built.mkdir()
    flags = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-fvisibility=hidden", "-Wall"]
    flags += ["-Wextra", "-Werror", "-I", os.path.join(ROOT, "csrc")]
    flags += [f'-DHYBRIDSQL_VERSION="{hybridsql.__version__}"']
    library = built / "hybridsql.so"
    subprocess.run(
        ["cc", *flags, "-shared", "-fPIC", str(source), "-o", str(library), "-lm"], check=True
    )
    assert platforms.inspect_library(str(library)).exports == EXPORTS
    obj = tmp_path / "hybridsql.o"
    subprocess.run(["cc", *flags[1:], "-O0", "-c", str(source), "-o", str(obj)], check=True)
    symbols = subprocess.run(["nm", str(obj)], check=True, capture_output=True, text=True).stdout
    defined = sorted(r.split()[2] for r in symbols.splitlines() if re.match(r"\S+ [TDBRC] ", r))
    assert defined == sorted([*EXPORTS, "sqlite3_api"])

    def session(path):
        done = subprocess.run(
            ["sqlite3", ":memory:"],
            input=f".load {path}\n{SESSION}",
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return done.stdout, done.stderr

    ours = session(library)
    assert ours == session(loadable_path())
    assert "bm25_candidate|-1|0" in ours[0] and "UNIQUE constraint failed: v.rowid" in ours[1]


def test_the_one_command_of_docs_platforms_builds_the_library(tmp_path):
    """docs/platforms.md's command for the library alone, run as written in a copy of csrc/:
    a library that loads in the sqlite3 shell."""
    with open(os.path.join(ROOT, "docs", "platforms.md"), encoding="utf-8") as f:
        (command,) = re.findall(r"```sh\n(cc .*?)\n```", f.read(), re.DOTALL)
    shutil.copytree(os.path.join(ROOT, "csrc"), tmp_path / "csrc")
    subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True, timeout=600)
    library = tmp_path / "hybridsql.so"
    assert platforms.inspect_library(str(library)).exports == EXPORTS
    shell = subprocess.run(
        ["sqlite3", ":memory:", f".load {library}", "select cosine_similarity('[1,0]', '[1,1]')"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.stdout == "0.707106781186547\n"
