"""One version source (issue 27, item 3): ``hybridsql.__version__`` is the only place the
version is written; the package metadata, ``hybridsql --version``, the MCP servers and both
``hybridsql_version()`` (the C one, set by the build, and the Python one) give the same."""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys

from conftest import HYBRIDSQL, ROOT

import hybridsql

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from platforms import SOURCES  # noqa: E402 (scripts/ is not a package)

SHELL = shutil.which("sqlite3")
VERSION = hybridsql.__version__


def test_every_way_in_reports_the_packages_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
    assert importlib.metadata.version("hybridsql") == VERSION
    cli = subprocess.run([HYBRIDSQL, "--version"], capture_output=True, text=True, check=True)
    assert cli.stdout.split()[:2] == ["hybridsql", VERSION]
    shell = subprocess.run(
        [SHELL, ":memory:", f".load {hybridsql.loadable_path()}", "select hybridsql_version()"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout == f"{VERSION}\n"
    for backend in ("extension", "numpy", "python"):
        conn = hybridsql.connect(":memory:", backend=backend)
        row = conn.execute("select hybridsql_version(), hybridsql_debug()").fetchone()
        assert row[0] == VERSION
        assert row[1].startswith(f"hybridsql {VERSION}; backend {backend}")


def test_the_mcp_servers_name_the_packages_version():
    from hybridsql.mcp.server import build_server  # the stdio and HTTP servers both use it

    assert build_server(lambda *args, **kwargs: None).version == VERSION


def test_the_version_is_written_once_in_the_source():
    """No other file of the package, its build or its C source holds the version literal."""
    literal = re.compile(re.escape(f'"{VERSION}"'))
    holders = []
    places = ["pyproject.toml", "setup.py", "scripts/platforms.py", "scripts/build-dist"]
    places += [f"csrc/{n}" for n in SOURCES]
    for folder, _, names in os.walk(os.path.join(ROOT, "hybridsql")):
        places += [os.path.relpath(os.path.join(folder, n), ROOT) for n in names]
    for place in places:
        path = os.path.join(ROOT, place)
        if os.path.isfile(path) and place.endswith((".py", ".c", ".toml", "build-dist")):
            with open(path, encoding="utf-8") as f:
                if literal.search(f.read()):
                    holders.append(place)
    assert holders == ["hybridsql/__init__.py"]
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        pyproject = f.read()
    assert 'dynamic = ["version"]' in pyproject
    assert 'version = { attr = "hybridsql.__version__" }' in pyproject


def test_the_c_library_takes_its_version_from_the_build(tmp_path):
    """The C source has no version of its own: the build's -DHYBRIDSQL_VERSION is what
    hybridsql_version() answers, and a build without it stops with a line that says so."""
    sources = [os.path.join(ROOT, "csrc", name) for name in SOURCES]
    library = str(tmp_path / "hybridsql.so")
    compile_ = ["cc", "-O0", "-shared", "-fPIC", "-I", os.path.join(ROOT, "csrc"), *sources]
    subprocess.run(
        [*compile_, '-DHYBRIDSQL_VERSION="9.8.7-test"', "-o", library, "-lm"], check=True
    )
    shell = subprocess.run(
        [SHELL, ":memory:", f".load {library}", "select hybridsql_version(), hybridsql_debug()"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout.startswith("9.8.7-test|hybridsql 9.8.7-test; backend extension;")
    bare = subprocess.run(
        [*compile_, "-o", library + ".bare", "-lm"], capture_output=True, text=True, check=False
    )
    assert bare.returncode != 0
    assert "build with -DHYBRIDSQL_VERSION" in bare.stderr
