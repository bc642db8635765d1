"""The platforms hybridsql ships for, and how one library is cross-compiled for each with zig.

Used by scripts/build-dist (the release) and by the platform checks (tests and .ci/run).
"""

import contextlib
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def package_version() -> str:
    """hybridsql.__version__, read from the source (the one place the version is written)."""
    with open(os.path.join(ROOT, "hybridsql", "__init__.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"$', f.read(), re.MULTILINE)[1]


@dataclass(frozen=True)
class Target:
    name: str  # short name, used in archive names
    zig: str  # zig's target triple (with the minimum OS version where zig needs it)
    wheel: str  # the wheel's platform tag
    library: str  # the library's file name on that platform

    @property
    def minimum(self) -> str:
        """The oldest OS the library is built for, read from the build's own target (zig's
        triple; musl's version from the wheel tag): what the archive's note and the checks say,
        as docs/platforms.md does."""
        arch, _, system = self.zig.partition("-")
        if system.startswith("linux-gnu."):
            return "glibc " + system.removeprefix("linux-gnu.")
        if system == "linux-musl":
            major, minor = re.fullmatch(r"musllinux_(\d+)_(\d+)_\w+", self.wheel).groups()
            return f"musl {major}.{minor}"
        if system.startswith("macos."):
            return "macOS " + system.removeprefix("macos.")
        return "Windows"


TARGETS = (
    Target("linux-x86_64", "x86_64-linux-gnu.2.17", "manylinux2014_x86_64", "hybridsql.so"),
    Target("linux-aarch64", "aarch64-linux-gnu.2.17", "manylinux2014_aarch64", "hybridsql.so"),
    Target("musllinux-x86_64", "x86_64-linux-musl", "musllinux_1_2_x86_64", "hybridsql.so"),
    Target("musllinux-aarch64", "aarch64-linux-musl", "musllinux_1_2_aarch64", "hybridsql.so"),
    Target("macos-x86_64", "x86_64-macos.10.13", "macosx_10_13_x86_64", "hybridsql.dylib"),
    Target("macos-arm64", "aarch64-macos.11.0", "macosx_11_0_arm64", "hybridsql.dylib"),
    Target("windows-x86_64", "x86_64-windows-gnu", "win_amd64", "hybridsql.dll"),
)

# Every C file under csrc/, relative to it (docs/architecture.md has the map), as setup.py's; the
# entry point first: zig names a DLL's import library after the first source (hybridsql.lib).
SOURCES = tuple(
    sorted(
        (
            os.path.relpath(path, os.path.join(ROOT, "csrc"))
            for path in glob.glob(os.path.join(ROOT, "csrc", "**", "*.c"), recursive=True)
        ),
        key=lambda name: (name != "hybridsql.c", name),
    )
)
FLAGS = [
    "-shared",
    "-O3",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fvisibility=hidden",
    "-Wall",
    "-Wextra",
    "-s",
]
FLAGS += [f'-DHYBRIDSQL_VERSION="{package_version()}"']


# The model file embed() finds beside the library (hybridsql/embedding/engine.py's name for it).
MODEL_FILE = "all-MiniLM-L6-v2-int8.hsmodel"
ARCHIVE_NOTE = """hybridsql {version}: the SQLite loadable extension for {platform}, alone.
Built from commit {commit} by scripts/build-dist (zig cc -target {zig}).
Minimum: {minimum}.

In the sqlite3 shell (SQLite adds the file's suffix):
    sqlite3 mem.db ".load ./hybridsql" "select hybridsql_version(), hybridsql_simd()"
From any SQLite binding that loads extensions, load the file {library} in this folder.
For embed(text), put the release's {model} in this folder (or name it with $HYBRIDSQL_MODEL, or
select hybridsql_model('PATH')):
    sqlite3 mem.db ".load ./hybridsql" "select length(embed('deploy freeze'))"
For Python, install the wheel instead: pip install ./hybridsql-{version}-py3-none-{wheel}.whl

hybridsql is licensed under the Apache License 2.0: the full text is in LICENSE.
"""


def archive_note(t: Target, version: str, commit: str) -> str:
    """The README.txt of ``t``'s archive (the library alone, with its licence)."""
    return ARCHIVE_NOTE.format(
        version=version,
        platform=t.name,
        commit=commit,
        zig=t.zig,
        minimum=t.minimum,
        library=t.library,
        model=MODEL_FILE,
        wheel=t.wheel,
    )


def target(name: str) -> Target:
    return next(t for t in TARGETS if t.name == name)


def build_library(t: Target, out_dir: str) -> str:
    """Cross-compiles the C sources for ``t`` into ``out_dir`` (made if missing); the path."""
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, t.library)
    zig = [sys.executable, "-m", "ziglang", "cc", "-target", t.zig]
    fpic = [] if "windows" in t.zig else ["-fPIC"]
    sources = [os.path.join(ROOT, "csrc", name) for name in SOURCES]
    source = ["-I", os.path.join(ROOT, "csrc"), *sources]
    if "musl" in t.zig:
        # zig links musl's libc as `libc.so`; Alpine's name for it, which auditwheel's musllinux
        # policy asks for, is libc.musl-<arch>.so.1 (musl's loader answers both with itself). So
        # the objects are linked against a stub of that name instead of zig's libc.
        objs = []
        for name, path in zip(SOURCES, sources, strict=True):
            obj = os.path.join(out_dir, name[:-2].replace(os.sep, "-") + ".o")
            cmd = [*zig, "-c", *FLAGS[1:], *fpic, "-I", os.path.join(ROOT, "csrc"), path]
            subprocess.run([*cmd, "-o", obj], check=True)
            objs.append(obj)
        stub = musl_libc_stub(t, out_dir)
        link = [*zig, "-shared", "-s", "-nostdlib", *objs, "-Wl,--no-as-needed", stub, "-o", out]
        subprocess.run(link, check=True, cwd=out_dir)
        for obj in [*objs, stub]:
            os.remove(obj)
        return out
    cmd = [*zig, *FLAGS, *fpic, *source, "-o", out]
    if "linux" in t.zig:
        cmd.append("-lm")
    if "macos" in t.zig:
        # Else the id of the library is the path it was built at, which differs by checkout.
        cmd.append(f"-Wl,-install_name,@rpath/{t.library}")
    subprocess.run(cmd, check=True, cwd=out_dir)
    if "windows" in t.zig:
        os.remove(os.path.join(out_dir, "hybridsql.lib"))  # the import library, for linkers only
    return out


def musl_libc_stub(t: Target, out_dir: str) -> str:
    """An empty shared library named as musl's libc is on Alpine (libc.musl-<arch>.so.1), made
    in ``out_dir`` for ``t``: what the musl libraries link against, and the libc
    ``auditwheel show`` finds for them (--ldpaths), where the host's libc.so is glibc's."""
    arch = t.zig.split("-")[0]
    name = f"libc.musl-{arch}.so.1"
    empty = os.path.join(out_dir, "empty.c")
    with open(empty, "w") as f:
        f.write("")
    stub = os.path.join(out_dir, name)
    cmd = [sys.executable, "-m", "ziglang", "cc", "-target", t.zig, "-shared", "-nostdlib"]
    subprocess.run([*cmd, f"-Wl,-soname,{name}", "-o", stub, empty], check=True)
    os.remove(empty)
    return stub


class CheckError(Exception):
    """A built library or wheel is not what its platform needs; the message says what."""


@dataclass(frozen=True)
class Library:
    """What a built library says about itself."""

    format: str  # "ELF", "PE" or "Mach-O"
    arch: str  # "x86_64" or "aarch64"
    min_os: str  # "glibc 2.17", "musl", "macOS 10.13", "Windows"
    exports: tuple[str, ...]  # sorted, without Mach-O's leading underscore
    needs: tuple[str, ...]  # the shared libraries it loads, sorted


def exports() -> tuple[str, ...]:
    """The symbols every library exports, sorted: the entry point SQLite derives from the file
    name, and the kernels hybridsql.h marks HS_EXPORT."""
    with open(os.path.join(ROOT, "csrc", "hybridsql.h")) as f:
        kernels = re.findall(r"^HS_EXPORT [^(]*?(\w+)\(", f.read(), re.M)
    return tuple(sorted([*kernels, "sqlite3_hybridsql_init"]))


def inspect_library(path: str) -> Library:
    """Reads ``path`` (ELF, PE or Mach-O) with pyelftools, pefile or macholib."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"\x7fELF":
        return _inspect_elf(path)
    if magic[:2] == b"MZ":
        return _inspect_pe(path)
    if magic in (b"\xcf\xfa\xed\xfe", b"\xfe\xed\xfa\xcf"):
        return _inspect_macho(path)
    raise CheckError(f"{path}: not an ELF, PE or Mach-O file (starts with {magic!r})")


def _inspect_elf(path: str) -> Library:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        arch = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}.get(elf["e_machine"], "other")
        dynamic = elf.get_section_by_name(".dynamic")
        needs = sorted(tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED")
        symbols = elf.get_section_by_name(".dynsym")
        exported = sorted(
            s.name
            for s in symbols.iter_symbols()
            if s["st_shndx"] != "SHN_UNDEF"
            and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
            and s["st_other"]["visibility"] == "STV_DEFAULT"
            and s.name
        )
        glibc = []
        versions = elf.get_section_by_name(".gnu.version_r")
        if versions is not None:
            for _, auxiliaries in versions.iter_versions():
                for aux in auxiliaries:
                    if aux.name.startswith("GLIBC_"):
                        glibc.append(tuple(int(n) for n in aux.name[6:].split(".")))
    if any(n.startswith("libc.musl-") for n in needs):
        min_os = "musl"
    else:
        min_os = "glibc " + ".".join(map(str, max(glibc))) if glibc else "none"
    return Library("ELF", arch, min_os, tuple(exported), tuple(needs))


def _inspect_pe(path: str) -> Library:
    import pefile

    pe = pefile.PE(path, fast_load=True)
    pe.parse_data_directories(
        directories=[
            pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_EXPORT"],
            pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
        ]
    )
    arch = {0x8664: "x86_64", 0xAA64: "aarch64"}.get(pe.FILE_HEADER.Machine, "other")
    table = getattr(pe, "DIRECTORY_ENTRY_EXPORT", None)  # absent where nothing is exported
    exported = sorted(s.name.decode() for s in table.symbols if s.name) if table else []
    needs = sorted(d.dll.decode() for d in getattr(pe, "DIRECTORY_ENTRY_IMPORT", []))
    pe.close()
    return Library("PE", arch, "Windows", tuple(exported), tuple(needs))


def _inspect_macho(path: str) -> Library:
    from macholib import mach_o
    from macholib.MachO import MachO
    from macholib.SymbolTable import SymbolTable

    macho = MachO(path)
    (header,) = macho.headers  # one architecture per file, not a universal binary
    cpu = header.header.cputype
    arch = {"x86_64": "x86_64", "ARM64": "aarch64"}.get(mach_o.CPU_TYPE_NAMES.get(cpu), "other")
    min_os, needs = "none", []
    for command, body, data in header.commands:
        if command.cmd == mach_o.LC_BUILD_VERSION:
            min_os = "macOS " + _macho_version(body.minos)
        elif command.cmd == mach_o.LC_VERSION_MIN_MACOSX:
            min_os = "macOS " + _macho_version(body.version)
        elif command.cmd == mach_o.LC_LOAD_DYLIB:
            needs.append(data.rstrip(b"\0").decode())
    # Defined, external and not private-external (N_PEXT): what dlsym finds.
    exported = sorted(
        name.decode()[1:]
        for entry, name in SymbolTable(macho).extdefsyms
        if not entry.n_type & mach_o.N_PEXT and name.startswith(b"_") and name[1:2] != b"_"
    )
    return Library("Mach-O", arch, min_os, tuple(exported), tuple(sorted(needs)))


def _macho_version(packed: int) -> str:
    """Mach-O's xxxx.yy.zz nibbles as "11.0" (the patch level only where it is not 0)."""
    major, minor, patch = packed >> 16, (packed >> 8) & 0xFF, packed & 0xFF
    return f"{major}.{minor}" + (f".{patch}" if patch else "")


# What each target's library must say of itself, beside the exports and its minimum OS.
EXPECTED = {
    "linux-x86_64": ("ELF", "x86_64"),
    "linux-aarch64": ("ELF", "aarch64"),
    "musllinux-x86_64": ("ELF", "x86_64"),
    "musllinux-aarch64": ("ELF", "aarch64"),
    "macos-x86_64": ("Mach-O", "x86_64"),
    "macos-arm64": ("Mach-O", "aarch64"),
    "windows-x86_64": ("PE", "x86_64"),
}

# The only libraries a Windows DLL may import: the OS's own and the universal C runtime.
WINDOWS_SYSTEM = re.compile(r"(kernel32|msvcrt|api-ms-win-crt-[a-z]+-l1-1-0)\.dll", re.I)


def check_library(t: Target, path: str) -> Library:
    """Raises CheckError where the library at ``path`` is not right for ``t``: its format,
    CPU, minimum OS, exports (exactly exports()) and the libraries it loads (the C library
    and nothing else). Returns what it read."""
    lib = inspect_library(path)
    problems = []
    fmt, arch = EXPECTED[t.name]
    # A library names its C library, not the musl version it needs.
    min_os = "musl" if t.minimum.startswith("musl ") else t.minimum
    if lib.format != fmt or lib.arch != arch:
        problems.append(f"is {lib.format} for {lib.arch}, expected {fmt} for {arch}")
    # glibc: the newest symbol version it needs may be older than the baseline, not newer.
    if min_os.startswith("glibc ") and lib.min_os.startswith("glibc "):
        if _version(lib.min_os[6:]) > _version(min_os[6:]):
            problems.append(f"needs {lib.min_os}, newer than {min_os}")
    elif lib.min_os != min_os:
        problems.append(f"has minimum OS {lib.min_os!r}, expected {min_os!r}")
    if lib.exports != exports():
        problems.append(f"exports {list(lib.exports)}, expected {list(exports())}")
    allowed = {
        "ELF": lambda n: n in ("libc.so.6", "libm.so.6", f"libc.musl-{arch}.so.1"),
        "PE": WINDOWS_SYSTEM.fullmatch,
        "Mach-O": lambda n: n == "/usr/lib/libSystem.B.dylib",
    }[fmt]
    foreign = [n for n in lib.needs if not allowed(n)]
    if foreign:
        problems.append(f"loads libraries that are not the system's: {foreign}")
    if problems:
        raise CheckError(f"{t.name} library {path}: " + "; ".join(problems))
    return lib


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split("."))


def check_wheel(t: Target, wheel: str) -> None:
    """Raises CheckError where the wheel is not right for ``t``: its name and WHEEL tag
    (py3-none-<platform>, not purelib), exactly one library, the one of ``t`` (check_library),
    and for Linux ``auditwheel show`` consistent with the tag the wheel carries."""
    name = os.path.basename(wheel)
    tag = f"py3-none-{t.wheel}"
    if not name.endswith(f"-{tag}.whl"):
        raise CheckError(f"{name}: expected a wheel tagged {tag}")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (dist_info,) = {n.split("/")[0] for n in names if ".dist-info/" in n}
        metadata = z.read(f"{dist_info}/WHEEL").decode()
        libraries = [n for n in names if n.endswith((".so", ".dylib", ".dll", ".pyd"))]
        if libraries != [f"hybridsql/{t.library}"]:
            raise CheckError(f"{name}: holds libraries {libraries}, expected hybridsql/{t.library}")
        with tempfile.TemporaryDirectory() as tmp:
            check_library(t, z.extract(libraries[0], tmp))
    if f"Tag: {tag}\n" not in metadata or "Root-Is-Purelib: false\n" not in metadata:
        raise CheckError(f"{name}: WHEEL says {metadata!r}, expected Tag: {tag}, not purelib")
    if "linux" in t.wheel:
        _auditwheel_show(t, wheel)


def _auditwheel_show(t: Target, wheel: str) -> None:
    """``auditwheel show``: the wheel must be consistent with its own tag or an older one."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "auditwheel", "show", "--json", wheel]
        if "musl" in t.zig:
            cmd[4:4] = ["--ldpaths", os.path.dirname(musl_libc_stub(t, tmp))]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    found, carried = _policy(json.loads(out)["overall_tag"]), _policy(t.wheel)
    if found is None or found[:2] != carried[:2] or found[2] > carried[2]:
        tag = json.loads(out)["overall_tag"]
        raise CheckError(f"{os.path.basename(wheel)}: auditwheel show says it is {tag}")


def _policy(tag: str):
    """("manylinux", arch, (2, 17)) for manylinux2014_x86_64 or manylinux_2_17_x86_64; None
    for a tag of no policy (linux_x86_64)."""
    tag = tag.replace("manylinux2014_", "manylinux_2_17_")
    m = re.fullmatch(r"(manylinux|musllinux)_(\d+)_(\d+)_(\w+)", tag)
    return m and (m[1], m[4], (int(m[2]), int(m[3])))


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
    prefix = env["WINEPREFIX"]
    os.makedirs(prefix, exist_ok=True)
    subprocess.run(["wineserver", "--persistent"], check=True, **quiet)
    try:
        # its standard error into a file, not a pipe: the services it starts keep a pipe open
        with tempfile.TemporaryFile("w+") as file:
            boot = subprocess.run(["wineboot", "--init"], stderr=file, check=False, **quiet)
            code = boot.returncode
            file.seek(0)
            said = file.read()
        if not code:
            yield
    finally:
        subprocess.run(["wineserver", "--kill"], check=True, **quiet)
    if code:  # the server stopped first: it is found by its prefix
        raise RuntimeError(wine_boot_failure(code, said, prefix))


WINE_PREFIX_MB = 700  # what wine 8 copies into a new prefix: its DLLs, about 630 MB of them


def wine_boot_failure(code: int, stderr: str, prefix: str) -> str:
    """The one line saying why wine's prefix could not be made, after removing what was made of
    it, so that the next run makes it anew. Wine exits with the low byte of its NTSTATUS, 53 for
    c0000135 (a DLL not found): what a full disk gives, the prefix's DLLs copied only in part."""
    said = [line.strip() for line in stderr.splitlines() if line.strip()]
    shutil.rmtree(prefix, ignore_errors=True)
    free = shutil.disk_usage(os.path.dirname(prefix) or ".").free // 2**20
    return (
        f"wineboot --init failed (exit {code}) making wine's prefix {prefix}: "
        f"{said[-1] if said else 'it printed nothing'}; {free} MB free there, "
        f"and a prefix takes about {WINE_PREFIX_MB} MB"
    )
