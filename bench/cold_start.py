"""Cold start of the command line (issue 25, item 6): the median and minimum wall time of 15
new processes for each command, on an index of two notes made with ``--embedder none``.

    python bench/cold_start.py
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = 15


def timed(cmd: list) -> str:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return f"median {statistics.median(times) * 1000:.0f} ms, min {min(times) * 1000:.0f} ms"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        notes = os.path.join(tmp, "notes")
        os.mkdir(notes)
        with open(os.path.join(notes, "a.md"), "w") as f:
            f.write("# Alpha\n\nThe quick brown fox jumps over sqlite.\n")
        with open(os.path.join(notes, "b.md"), "w") as f:
            f.write("# Beta\n\nWAL mode and checkpoints.\n")
        db = os.path.join(tmp, "k.db")
        subprocess.run(
            ["hybridsql", "index", notes, "--db", db, "--embedder", "none"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "hybridsql --version": ["hybridsql", "--version"],
            "hybridsql --help": ["hybridsql", "--help"],
            "hybridsql search fox --mode keyword": [
                "hybridsql",
                "search",
                "fox",
                "--db",
                db,
                "--mode",
                "keyword",
            ],
        }
        for name, cmd in commands.items():
            print(f"{name}: {timed(cmd)}", flush=True)


if __name__ == "__main__":
    main()
