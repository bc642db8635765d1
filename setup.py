"""Builds the C sources of csrc/ into a plain SQLite loadable library, ``hybridsql/hybridsql.so``
(``.dylib`` on macOS, ``.dll`` on Windows), with the system C compiler.

The library has no Python in it: the stock ``sqlite3`` shell can ``.load`` it (SQLite derives
the entry point ``sqlite3_hybridsql_init`` from the file name), and the Python layer opens the
same file with cffi in ABI mode for its kernels. So a wheel serves every Python 3 of its
platform and is tagged ``py3-none-<platform>``.

- ``HYBRIDSQL_LIBRARY=/path/to/hybridsql.so``: put that prebuilt library in the package instead
  of compiling (``scripts/build-dist`` does, with libraries cross-compiled by zig). It keeps its
  file name, so the ``.dll`` and ``.dylib`` of other platforms can be packed here too.
- ``HYBRIDSQL_SANITIZE=1``: build with AddressSanitizer and UndefinedBehaviorSanitizer.
"""

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

NO_COMPILER = """
hybridsql: no working C compiler was found ({compiler!r}), and there is no prebuilt wheel for
this platform or pip did not choose one.

Prebuilt wheels (no compiler needed, any CPython >= 3.10) exist for: Linux x86_64 and aarch64
(glibc >= 2.17, and musl), macOS x86_64 (10.13+) and arm64 (11.0+), Windows x86_64. Upgrade pip
(`python -m pip install -U pip`) so that it finds them, or install a C compiler and retry:
  Debian/Ubuntu: apt-get install gcc      Alpine: apk add gcc musl-dev
  Fedora/RHEL:   dnf install gcc          macOS:  xcode-select --install
"""


def missing_compiler():
    """The C compiler a build would run, where it is not on PATH or compiles nothing (unix
    only: ``CC=false`` is on PATH); else None."""
    if sys.platform == "win32" or os.environ.get("HYBRIDSQL_LIBRARY"):
        return None
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not shutil.which(cc[0]):
        return cc[0]
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "probe.c")
        with open(source, "w") as f:
            f.write("int probe(void) { return 0; }\n")
        done = subprocess.run(
            [*cc, "-c", source, "-o", os.path.join(tmp, "probe.o")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    return None if done.returncode == 0 else " ".join(cc)


# Before setuptools prints anything, so that the message is the first thing a user reads.
BUILDS = {"build", "build_ext", "bdist_wheel", "install", "develop", "editable_wheel"}
if BUILDS & set(sys.argv[1:]):
    missing = missing_compiler()
    if missing:
        sys.exit(NO_COMPILER.format(compiler=missing))

from setuptools import Extension, setup  # noqa: E402 (after the check above)
from setuptools.command.bdist_wheel import bdist_wheel  # noqa: E402
from setuptools.command.build_ext import build_ext  # noqa: E402


def package_version() -> str:
    """hybridsql.__version__, read from the source (the one place the version is written)."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "hybridsql", "__init__.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"$', f.read(), re.MULTILINE)[1]


SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
# Hidden visibility: the library exports its entry point and the kernels of hybridsql.h alone.
COMPILE_ARGS = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-fvisibility=hidden"] + (
    SANITIZE if os.environ.get("HYBRIDSQL_SANITIZE") else []
)
# Stripped, as the release libraries are; a sanitized build keeps its symbols for the reports.
LINK_ARGS = (
    SANITIZE
    if os.environ.get("HYBRIDSQL_SANITIZE")
    else (["-s"] if sys.platform.startswith("linux") else [])
)
# A prebuilt library keeps its own name: scripts/build-dist packs the .dll and .dylib on Linux.
LIBRARY = os.path.basename(os.environ.get("HYBRIDSQL_LIBRARY", "")) or {
    "win32": "hybridsql.dll",
    "darwin": "hybridsql.dylib",
}.get(sys.platform, "hybridsql.so")


class BuildLibrary(build_ext):
    """Builds (or copies) the loadable library under its platform's plain name."""

    def get_ext_filename(self, fullname):
        # distutils asks with the full name and with its last part alone; answer both.
        if fullname == "hybridsql.hybridsql":
            return os.path.join("hybridsql", LIBRARY)
        if fullname == "hybridsql":
            return LIBRARY
        return super().get_ext_filename(fullname)

    def get_export_symbols(self, ext):
        return []  # no PyInit_: the C source marks what it exports

    def build_extension(self, ext):
        out = self.get_ext_fullpath(ext.name)
        prebuilt = os.environ.get("HYBRIDSQL_LIBRARY")
        if prebuilt:
            os.makedirs(os.path.dirname(out), exist_ok=True)
            shutil.copyfile(prebuilt, out)
            return
        super().build_extension(ext)


class Wheel(bdist_wheel):
    """Tags the wheel ``py3-none-<platform>``: the library does not depend on the Python."""

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


library = Extension(
    "hybridsql.hybridsql",
    # Every C file under csrc/ (docs/architecture.md has the map), as scripts/platforms.py's.
    sources=sorted(glob.glob("csrc/**/*.c", recursive=True)),
    include_dirs=["csrc"],
    define_macros=[("HYBRIDSQL_VERSION", f'"{package_version()}"')],
    extra_compile_args=COMPILE_ARGS,
    extra_link_args=LINK_ARGS,
    libraries=["m"],
)

setup(ext_modules=[library], cmdclass={"build_ext": BuildLibrary, "bdist_wheel": Wheel})
