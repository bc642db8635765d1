"""The platforms hybridsql ships for, and how one library is cross-compiled for each with zig.

Used by scripts/build-dist (the release) and by the platform checks (tests and .ci/run).
"""

import os
import subprocess
import sys
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
