"""The platforms hybridsql ships for, and how one library is cross-compiled for each with zig.

Used by scripts/build-dist (the release) and by the platform checks (tests and .ci/run).
"""

import contextlib
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Target:
    name: str  # short name, used in archive names
    zig: str  # zig's target triple (with the minimum OS version where zig needs it)
    wheel: str  # the wheel's platform tag
    library: str  # the library's file name on that platform


TARGETS = (
    Target("linux-x86_64", "x86_64-linux-gnu.2.17", "manylinux2014_x86_64", "hybridsql.so"),
    Target("linux-aarch64", "aarch64-linux-gnu.2.17", "manylinux2014_aarch64", "hybridsql.so"),
    Target("musllinux-x86_64", "x86_64-linux-musl", "musllinux_1_2_x86_64", "hybridsql.so"),
    Target("musllinux-aarch64", "aarch64-linux-musl", "musllinux_1_2_aarch64", "hybridsql.so"),
    Target("macos-x86_64", "x86_64-macos.10.13", "macosx_10_13_x86_64", "hybridsql.dylib"),
    Target("macos-arm64", "aarch64-macos.11.0", "macosx_11_0_arm64", "hybridsql.dylib"),
    Target("windows-x86_64", "x86_64-windows-gnu", "win_amd64", "hybridsql.dll"),
)

FLAGS = ["-shared", "-O3", "-fno-math-errno", "-fvisibility=hidden", "-Wall", "-Wextra", "-s"]


def target(name: str) -> Target:
    return next(t for t in TARGETS if t.name == name)


def build_library(t: Target, out_dir: str) -> str:
    """Cross-compiles csrc/hybridsql.c for ``t`` into ``out_dir`` (made if missing); the path."""
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, t.library)
    fpic = [] if "windows" in t.zig else ["-fPIC"]
    cmd = [sys.executable, "-m", "ziglang", "cc", "-target", t.zig, *FLAGS, *fpic]
    cmd += ["-I", os.path.join(ROOT, "csrc"), os.path.join(ROOT, "csrc", "hybridsql.c")]
    cmd += ["-o", out]
    if "linux" in t.zig:
        cmd.append("-lm")
    subprocess.run(cmd, check=True, cwd=out_dir)
    return out


# ---------------------------------------------------------------------------------------------
# Emulation: the real programs that load each Linux and Windows library, run on this x86_64
# Linux machine (tests/test_platforms.py, .ci/run). Everything built or downloaded is kept under
# EMULATION, so that one run builds each shell once; nothing is written outside it.

EMULATION = os.path.join(ROOT, "build", "platforms")
# The SQLite amalgamation (sqlite3.c and shell.c) ships in sqlean.py's sdist; a pinned version,
# so that every run builds the same shells.
AMALGAMATION_SDIST = "sqlean.py==3.50.4.5"
# Debian's own aarch64 sqlite3 shell with the libraries it needs, and musl's aarch64 runtime
# (ld-musl-aarch64.so.1), fetched with `apt-get download` (dpkg must know the arm64 architecture).
ARM64_DEBS = ("libc6", "sqlite3", "libsqlite3-0", "libreadline8", "libtinfo6", "zlib1g", "musl")
# The shells' own build: FTS5 for bm25() and bm25_candidate(); -O0, as speed does not matter.
# zig's -O0 also adds its UBSan runtime, which needs a newer musl than Debian's: left out.
SHELL_FLAGS = ["-O0", "-DSQLITE_ENABLE_FTS5", "-DSQLITE_THREADSAFE=0"]
ZIG_SHELL_FLAGS = ["-fno-sanitize=undefined"]


@dataclass(frozen=True)
class Shell:
    """A sqlite3 shell for one target: ``argv`` runs it (under qemu-user or wine where needed)."""

    target: str  # the Target.name of the library it loads
    argv: tuple
    env: tuple = ()  # (name, value) pairs added to the environment


def emulators_missing() -> list:
    """What this machine lacks to run the emulated shells, each as the Debian package (or step)
    that provides it; empty when nothing is missing."""
    missing = [
        package
        for command, package in (
            ("qemu-aarch64", "qemu-user"),
            ("wine", "wine"),
            ("musl-gcc", "musl-tools"),
        )
        if not shutil.which(command)
    ]
    if importlib.util.find_spec("ziglang") is None:
        missing.append("ziglang (pip)")
    if shutil.which("dpkg"):
        foreign = subprocess.run(
            ["dpkg", "--print-foreign-architectures"], capture_output=True, text=True, check=False
        ).stdout.split()
        if "arm64" not in foreign:
            missing.append("dpkg --add-architecture arm64 && apt-get update")
    else:
        missing.append("dpkg")
    return missing


def amalgamation(cache: str = EMULATION) -> str:
    """The folder holding sqlite3.c, shell.c and their headers (downloaded once into cache)."""
    out = os.path.join(cache, "sqlite")
    if os.path.exists(os.path.join(out, "shell.c")):
        return out
    download = os.path.join(cache, "download")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
    subprocess.run([*cmd, "-d", download, AMALGAMATION_SDIST], check=True)
    (sdist,) = glob.glob(os.path.join(download, "sqlean_py-*.tar.gz"))
    os.makedirs(out, exist_ok=True)
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            name = os.path.basename(member.name)
            if os.path.dirname(member.name).endswith("/sqlite") and name in (
                "sqlite3.c",
                "shell.c",
                "sqlite3.h",
                "sqlite3ext.h",
            ):
                data = tar.extractfile(member).read()
                if name == "sqlite3.c":
                    # sqlean appends its own initialisation after the amalgamation's end
                    end = b"/************************** End of sqlite3.c"
                    data = data[: data.index(b"\n", data.index(end)) + 1]
                with open(os.path.join(out, name + ".part"), "wb") as f:
                    f.write(data)
    for name in ("sqlite3.h", "sqlite3ext.h", "sqlite3.c", "shell.c"):  # shell.c last: the mark
        os.replace(os.path.join(out, name + ".part"), os.path.join(out, name))
    return out


def arm64_root(cache: str = EMULATION) -> str:
    """A folder holding Debian's arm64 runtime (glibc, musl) and sqlite3 shell: qemu-aarch64's
    -L. Needs `dpkg --add-architecture arm64` and `apt-get update` done beforehand."""
    root = os.path.join(cache, "arm64-root")
    if os.path.exists(os.path.join(root, "usr", "bin", "sqlite3")):
        return root
    debs = os.path.join(cache, "arm64-debs")
    os.makedirs(debs, exist_ok=True)
    packages = [f"{p}:arm64" for p in ARM64_DEBS]
    subprocess.run(["apt-get", "download", "-qq", *packages], cwd=debs, check=True)
    part = root + ".part"
    os.makedirs(part, exist_ok=True)
    for deb in sorted(os.listdir(debs)):
        subprocess.run(["dpkg-deb", "-x", os.path.join(debs, deb), part], check=True)
    os.replace(part, root)
    return root


def build_shell(name: str, cache: str = EMULATION) -> str:
    """Builds the sqlite3 shell for the target called ``name`` (musllinux-x86_64 by musl-gcc,
    musllinux-aarch64 and windows-x86_64 by zig) from the amalgamation, once; its path."""
    source = amalgamation(cache)
    out = os.path.join(cache, "shells", name, "sqlite3.exe" if "windows" in name else "sqlite3")
    if os.path.exists(out):
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if name == "musllinux-x86_64":
        cmd = ["musl-gcc", *SHELL_FLAGS]
    else:
        zig = target(name).zig
        cmd = [
            sys.executable,
            "-m",
            "ziglang",
            "cc",
            "-target",
            zig,
            *SHELL_FLAGS,
            *ZIG_SHELL_FLAGS,
        ]
        if "linux" in zig:
            cmd.append("-dynamic")  # a static musl cannot dlopen
    sources = [os.path.join(source, "shell.c"), os.path.join(source, "sqlite3.c")]
    libs = ["-lm"] if "linux" in name else []
    subprocess.run(
        [*cmd, *sources, "-o", out + ".part", *libs], check=True, cwd=os.path.dirname(out)
    )
    os.replace(out + ".part", out)
    return out


def emulated_shells(cache: str = EMULATION) -> dict:
    """{target name: Shell} for every Linux and Windows target but the native one, each the real
    program that loads that target's library: Debian's arm64 sqlite3 under qemu-user (glibc),
    musl-linked shells (the aarch64 one under qemu-user) and a Windows sqlite3.exe under wine."""
    root = arm64_root(cache)
    qemu = ("qemu-aarch64", "-L", root)
    return {
        "linux-aarch64": Shell(
            "linux-aarch64", (*qemu, os.path.join(root, "usr", "bin", "sqlite3"))
        ),
        "musllinux-x86_64": Shell("musllinux-x86_64", (build_shell("musllinux-x86_64", cache),)),
        "musllinux-aarch64": Shell(
            "musllinux-aarch64", (*qemu, build_shell("musllinux-aarch64", cache))
        ),
        "windows-x86_64": Shell(
            "windows-x86_64", ("wine", build_shell("windows-x86_64", cache)), wine_env(cache)
        ),
    }


def wine_env(cache: str = EMULATION) -> tuple:
    """wine's environment: its own prefix under cache, and no debug messages."""
    return (("WINEPREFIX", os.path.join(cache, "wine")), ("WINEDEBUG", "-all"))


@contextlib.contextmanager
def wine_server(cache: str = EMULATION):
    """Runs a wine server for the prefix under cache while the block runs, with the prefix made
    (once, 15 to 30 seconds) and its services started here. Without it each wine command starts
    them itself, and they keep its output pipes open until the server stops, seconds later."""
    env = {**os.environ, **dict(wine_env(cache))}
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "env": env}
    os.makedirs(env["WINEPREFIX"], exist_ok=True)
    subprocess.run(["wineserver", "--persistent"], check=True, **quiet)
    try:
        subprocess.run(["wineboot", "--init"], check=True, stderr=subprocess.DEVNULL, **quiet)
        yield
    finally:
        subprocess.run(["wineserver", "--kill"], check=True, **quiet)
