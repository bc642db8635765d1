"""Cold start of the command line: median and minimum wall time of 15 new processes each.
Needs an index at /tmp/cold/k.db (hybridsql index NOTES --db /tmp/cold/k.db --embedder none)."""

import statistics, subprocess, sys, time

cmds = {
    "--version": ["hybridsql", "--version"],
    "--help": ["hybridsql", "--help"],
    "search --mode keyword": [
        "hybridsql",
        "search",
        "fox",
        "--db",
        "/tmp/cold/k.db",
        "--mode",
        "keyword",
    ],
    "python -c pass": [sys.executable, "-c", "pass"],
}
for name, cmd in cmds.items():
    ts = []
    for _ in range(15):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        ts.append(time.perf_counter() - t)
    print(f"{name}: median {statistics.median(ts) * 1000:.0f} ms, min {min(ts) * 1000:.0f} ms")
