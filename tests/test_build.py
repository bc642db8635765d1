"""Building from source: what a user without a C compiler sees, and what a wheel is tagged."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_build_without_a_compiler_says_so_first(tmp_path):
    """No compiler on PATH: one message naming the platforms with wheels and what to install,
    before setuptools prints anything, and no traceback."""
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(sys.executable, bare / "python")
    proc = subprocess.run(
        [str(bare / "python"), "setup.py", "bdist_wheel"],
        check=False,
        cwd=ROOT,
        env={"PATH": str(bare), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == (
        "hybridsql: no C compiler was found ('gcc'), and there is no prebuilt wheel for this"
    )
    assert "Linux x86_64 and aarch64" in proc.stderr and "Windows x86_64" in proc.stderr
    assert "apt-get install gcc" in proc.stderr and "Traceback" not in proc.stderr


def test_the_wheel_serves_every_python_of_its_platform(tmp_path):
    """The library has no Python in it, so the wheel is py3-none-<platform>, not cpXY."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), ROOT],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = os.listdir(tmp_path)
    assert wheel.startswith("hybridsql-0.1.0-py3-none-linux_") and wheel.endswith(".whl")
