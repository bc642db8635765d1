"""Docs that cannot go stale (issue 27, item 4): every SQL example of README.md, docs/sql.md and
examples/README.md is run in the stock ``sqlite3`` shell against the example folder's index and
prints what the page says; docs/cli.md is the commands' --help; docs/api.md has every public
name with its parameters; docs/architecture.md names every module once; CHANGELOG.md starts at
this release."""

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import HYBRIDSQL, ROOT, run_sqlite3

import hybridsql

SQL_PAGES = ("README.md", "docs/sql.md", "examples/README.md")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def read(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def blocks(page: str):
    """(line, language, body) of each fenced block of ``page``."""
    text = read(page)
    for m in FENCE.finditer(text):
        yield text[: m.start()].count("\n") + 1, m.group(1), m.group(2)


def transcript(body: str) -> list:
    """A ``sqlite>`` transcript as [(statement, expected lines)], continuation lines
    (``   ...> ``) joined to their statement with newlines."""
    steps: list = []
    for line in body.splitlines():
        if line.startswith("sqlite> "):
            steps.append([line[len("sqlite> ") :], []])
        elif line.startswith("   ...> "):
            assert not steps[-1][1], f"a continuation after output: {line!r}"
            steps[-1][0] += "\n" + line[len("   ...> ") :]
        else:
            steps[-1][1].append(line)
    return [(statement, lines) for statement, lines in steps]


def transcripts() -> list:
    found = []
    for page in SQL_PAGES:
        for line, _, body in blocks(page):
            if body.startswith("sqlite> "):
                found.append(pytest.param(body, id=f"{page}:{line}"))
    return found


def shell_lines(db: str, *statements: str) -> list:
    """What the stock sqlite3 shell prints for ``statements`` given on its command line after
    ``.load`` of the extension (as the pages' first example runs it): stdout, then stderr."""
    done = run_sqlite3(db, *statements)
    return done.stdout.splitlines() + done.stderr.splitlines()


def machine_specific(expected: list, db: str) -> list:
    """``expected`` with the fields of hybridsql_debug() that depend on the machine (the SIMD
    path its CPU takes, the version of the SQLite library the shell runs) set to this one's."""
    simd, sqlite = shell_lines(db, "select hybridsql_simd(), sqlite_version()")[0].split("|")
    return [
        re.sub(r"; simd [^;]+; sqlite [^;]+;", f"; simd {simd}; sqlite {sqlite};", line)
        if line.startswith("hybridsql ")
        else line
        for line in expected
    ]


@pytest.fixture
def example_copy(example_db, tmp_path):
    """A function that gives a fresh copy of the example folder's index, named mem.db."""
    count = iter(range(1_000_000))

    def copy() -> str:
        folder = tmp_path / str(next(count))
        folder.mkdir()
        shutil.copyfile(example_db, folder / "mem.db")
        return str(folder / "mem.db")

    return copy


@pytest.mark.parametrize("body", transcripts())
def test_every_sql_transcript_prints_what_the_page_says(body, example_copy):
    """Each statement runs in a fresh copy of the index, after the statements before it in the
    same block that print nothing (the tables they make, the rows they insert)."""
    earlier: list = []
    for statement, expected in transcript(body):
        db = example_copy()
        assert shell_lines(db, *earlier, statement) == machine_specific(expected, db), statement
        if not expected:
            earlier.append(statement)


def sh_examples() -> list:
    """Each ``sqlite3 mem.db ...`` command line of a ```sh block, with the lines the page shows
    under it as ``# output``."""
    found = []
    for page in SQL_PAGES:
        for line, language, body in blocks(page):
            if language != "sh":
                continue
            lines = body.splitlines()
            for i, command in enumerate(lines):
                if command.startswith("sqlite3 mem.db "):
                    shown = []
                    for after in lines[i + 1 :]:
                        if not after.startswith("# "):
                            break
                        shown.append(after[2:])
                    found.append(pytest.param(command, shown, id=f"{page}:{line + 1 + i}"))
    return found


@pytest.mark.parametrize(("command", "shown"), sh_examples())
def test_every_sqlite3_command_line_prints_what_the_page_says(command, shown, example_copy):
    db = example_copy()
    bin_dir = os.path.dirname(HYBRIDSQL)
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=os.path.dirname(db),
        env={**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.splitlines() + done.stderr.splitlines() == shown


def test_no_sql_example_escapes_the_run():
    """A ```sql block would show SQL that no test runs: the pages write each example as a
    ``sqlite>`` transcript with its output."""
    unrun = [
        f"{page}:{line}"
        for page in SQL_PAGES
        for line, language, _ in blocks(page)
        if language == "sql"
    ]
    assert unrun == []
    assert len(transcripts()) >= 12 and len(sh_examples()) >= 2


# -- docs/cli.md ----------------------------------------------------------------------------

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import cli_reference  # noqa: E402 (scripts/ is not a package)


def cli_sections() -> dict:
    """docs/cli.md's sections: each command's path and the help text shown under it."""
    found = re.findall(
        r"^## (hybridsql[\w -]*)\n\n```\n(.*?)```\n", read("docs/cli.md"), re.M | re.S
    )
    return dict(found)


def test_the_cli_reference_is_what_the_script_writes():
    assert read("docs/cli.md") == cli_reference.page(), (
        "docs/cli.md is stale: run python scripts/cli_reference.py"
    )


def test_the_cli_reference_shows_every_commands_help_as_it_prints():
    from hybridsql.cli import cli

    sections = cli_sections()
    paths = [" ".join(path) for path, _ in cli_reference.commands(cli)]
    assert list(sections) == paths
    assert {"hybridsql", "hybridsql search", "hybridsql memory session end"} <= set(paths)
    for path, shown in sections.items():
        done = subprocess.run(
            [HYBRIDSQL, *path.split()[1:], "--help"],
            env={**os.environ, "COLUMNS": cli_reference.COLUMNS},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert done.stdout == shown, path


# -- docs/api.md ----------------------------------------------------------------------------


def shown_default(value) -> str:
    """A default as docs/api.md writes it: its repr, a function by its dotted name."""
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def signature(obj) -> str:
    """``(a, b=1, **options)``: the parameters of a public function, class or method as the API
    page writes them (a dataclass field's default factory by what it makes)."""
    import dataclasses
    import inspect

    factories = {}
    if dataclasses.is_dataclass(obj):
        factories = {
            f.name: f.default_factory()
            for f in dataclasses.fields(obj)
            if f.default_factory is not dataclasses.MISSING
        }
    parts = []
    for p in inspect.signature(obj).parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        elif p.name in factories:
            parts.append(f"{p.name}={factories[p.name]!r}")
        elif p.default is not p.empty:
            parts.append(f"{p.name}={shown_default(p.default)}")
        else:
            parts.append(p.name)
    return f"({', '.join(parts)})"


def api_entries() -> list:
    """What docs/api.md must show: each public name (with its parameters, but for the errors),
    and each public method of a public class, as ``Class.method(params)``."""
    import inspect

    entries = []
    for name in hybridsql.__all__:
        obj = getattr(hybridsql, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            entries.append(f"{name}({obj.__mro__[1].__name__})")
            continue
        entries.append(name + signature(obj))
        if inspect.isclass(obj):
            for attr in dir(obj):  # its own methods and those of the classes it is made of
                member = inspect.getattr_static(obj, attr)
                # as_dict() (plain dicts, for JSON) is said once on the page, not per class
                public = not attr.startswith("_") and attr != "as_dict"
                ours = (getattr(member, "__module__", None) or "").startswith("hybridsql")
                if public and inspect.isfunction(member) and ours:
                    entries.append(f"{name}.{attr}{signature(member)}")
    return entries


def test_the_api_page_shows_every_public_name_with_its_parameters():
    """Every public name is on docs/api.md as a heading, with its parameters and defaults as
    they are; every public method as a line of its class; nothing else is written as one."""
    page = read("docs/api.md")
    shown = re.findall(r"^#{3,4} `([^`]+)`$", page, re.MULTILINE)
    assert sorted(shown) == sorted(api_entries())
    assert len(shown) == len(set(shown))
    assert "SearchOptions(mode='hybrid'" in "\n".join(shown)  # the page was read


def test_the_api_pages_example_runs(example_db, tmp_path):
    """From another folder than the checkout (which would import the unbuilt source), on a
    copy of the example index (its embedding cache spares the model the work)."""
    (code,) = [body for _, language, body in blocks("docs/api.md") if language == "python"]
    shutil.copytree(os.path.join(ROOT, "examples"), tmp_path / "examples")
    shutil.copyfile(example_db, tmp_path / "mem.db")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    *found, memories = done.stdout.splitlines()
    assert found and all(re.fullmatch(r"\S+\.md \d+ \d\.\d+", line) for line in found)
    assert memories == "['Deploys are frozen from 2026-11-26 to 12-01']"


def test_the_api_page_names_the_match_types_a_search_returns(example_db):
    """`SearchResult.match_type` as docs/api.md lists it is what searches return, every mode."""
    page = read("docs/api.md")
    entry = page[page.index("### `SearchResult(") :]
    said = re.search(r"`match_type` (.*?); `other_ranges`", entry, re.S).group(1)
    listed = set(re.findall(r"`(\w+)`", said))
    found = set()
    with hybridsql.HybridIndex(example_db, embedder="local", readonly=True) as idx:
        for mode in ("hybrid", "keyword", "semantic"):
            results = idx.search("how should python code be indented?", mode=mode, limit=20)
            found |= {r.match_type for r in results}
    assert listed == found == {"semantic", "keyword", "both"}


def test_the_readmes_nearest_chunks_example_finds_them_after_the_chunks_are_cut_again(tmp_path):
    """The README's k-nearest statement picks its first chunk by what it is (MEMORY.md's first
    lines), not by a chunk id that a file indexed again no longer has."""
    (statement,) = [
        statement
        for body in (body for _, _, body in blocks("README.md") if body.startswith("sqlite> "))
        for statement, _ in transcript(body)
        if "v.vector match (select vector from vectors" in statement
    ]
    folder = tmp_path / "examples"
    shutil.copytree(os.path.join(ROOT, "examples", "memory"), folder)
    db = str(tmp_path / "mem.db")
    with hybridsql.HybridIndex(db, embedder="local") as idx:
        idx.index_folder(str(folder))
        before = idx.conn.execute("select min(id) from chunks").fetchall()
        text = (folder / "MEMORY.md").read_text()
        (folder / "MEMORY.md").write_text("# Memory\n\nIndexed again.\n\n" + text)
        idx.index_folder(str(folder))
        assert idx.conn.execute("select min(id) from chunks").fetchall() != before
    lines = shell_lines(db, statement)
    assert len(lines) == 3 and lines[0] == "MEMORY.md|1.0", lines


# -- CHANGELOG.md ---------------------------------------------------------------------------

KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")


def test_the_changelog_keeps_a_changelogs_form_and_starts_at_this_release():
    text = read("CHANGELOG.md")
    assert text.startswith("# Changelog\n")
    releases = re.findall(r"^## \[([^\]]+)\](.*)$", text, re.MULTILINE)
    names = [name for name, _ in releases]
    assert names[0] == "Unreleased" and releases[0][1] == ""
    versions = releases[1:]
    assert versions, "no release in CHANGELOG.md"
    for name, rest in versions:
        assert re.fullmatch(r"\d+\.\d+\.\d+", name) and re.fullmatch(r" - \d{4}-\d{2}-\d{2}", rest)
    assert versions[0][0] == hybridsql.__version__
    kinds = re.findall(r"^### (.+)$", text, re.MULTILINE)
    assert kinds and set(kinds) <= set(KINDS)


# -- docs/architecture.md -------------------------------------------------------------------


def package_modules() -> list:
    """Every module of the package, as a path below hybridsql/ (search/plan.py)."""
    package = os.path.join(ROOT, "hybridsql")
    found = []
    for folder, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                found.append(os.path.relpath(os.path.join(folder, name), package))
    return sorted(path.replace(os.sep, "/") for path in found)


def architecture_modules() -> list:
    """The modules docs/architecture.md's map names: its first block's lines below
    ``hybridsql/``, each ``  name.py  role``, or ``  package/  role`` (its __init__.py) with
    its modules below it, indented by two more spaces."""
    _, _, body = next(blocks("docs/architecture.md"))
    below = body.split("hybridsql/\n", 1)[1]
    named, package = [], None
    for line in below.splitlines():
        m = re.fullmatch(r"(  |    )(\w+\.py|\w+/)  +\S.*", line)
        assert m, f"not a module line with its role: {line!r}"
        indent, name = m.groups()
        if indent == "    ":
            assert package, f"a module below no package: {line!r}"
            named.append(package + name)
        elif name.endswith("/"):
            package = name
            named.append(name + "__init__.py")
        else:
            package = None
            named.append(name)
    return named


def test_the_architecture_map_names_every_module_once_with_its_role():
    named = architecture_modules()
    assert len(named) == len(set(named)), "a module is named twice"
    assert sorted(named) == package_modules()
