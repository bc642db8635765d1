#!/usr/bin/env python3
"""Writes the library as one C file, as SQLite's tool/mksqlite3c.tcl writes sqlite3.c.

The C files of csrc/ are copied in the order of their layers (ORDER), and each header of csrc/ is
inlined where it is first included (its later includes are commented out). SQLite's headers
(sqlite3.h, sqlite3ext.h) are not inlined: the file includes them, and the release's archive
carries them beside it. Three changes make one translation unit of many:

- every function and variable that crosses a file (declared in a header of csrc/, not HS_EXPORT)
  becomes static, so that the file defines no global symbol but the entry point, the exported
  kernels and sqlite3_api: it can be compiled into a program or into SQLite itself beside code of
  any names;
- the macros a .c file defines for itself are undefined where it ends (load.c's HS_ALIGN is
  not another file's); one that a header already defines stops the script;
- a feature macro a .c file sets before its first include (_GNU_SOURCE) moves to the top.

    python scripts/amalgamate.py OUT.c

tests/test_build.py compiles the result and compares it with the library; scripts/build-dist
ships it (hybridsql-VERSION-amalgamation.tar.gz).
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "csrc")
VENDORED = ("sqlite3.h", "sqlite3ext.h")

# Lowest layer first (docs/architecture.md, The C library; vector_index/internal.h lists its
# files in this order): a variable is defined before any file that uses it.
ORDER = (
    "kernels/simd.c",
    "kernels/topk.c",
    "kernels/scores.c",
    "kernels/vectext.c",
    "model/unigram.c",
    "model/tokenizer.c",
    "model/ops.c",
    "model/load.c",
    "model/model.c",
    "functions/args.c",
    "functions/scalar.c",
    "functions/bm25_candidate.c",
    "model/files.c",
    "model/embedsql.c",
    "vector_index/storage.c",
    "vector_index/blocks.c",
    "vector_index/held.c",
    "vector_index/cache.c",
    "vector_index/plan.c",
    "vector_index/knn.c",
    "vector_index/scan.c",
    "vector_index/write.c",
    "vector_index/table.c",
    "vector_index/integrity.c",
    "vector_index/vector_index.c",
    "hybridsql.c",
)

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)")
# A declaration of a function at the start of a line: its type, then its name and "(".
FUNCTION = re.compile(
    r"^(?!static\b|extern\b|typedef\b|HS_EXPORT\b|return\b)[A-Za-z_][\w \*]*?\b(\w+)\("
)
EXTERN = re.compile(r"^extern\s+[^;(]*?\b(\w+)(\[\])?;")


def commented(line: str) -> str:
    """line as a comment, its own comment markers made harmless (as mksqlite3c does)."""
    return "/* " + line.strip().replace("/*", "**").replace("*/", "**") + " */"


def read(path: str) -> list[str]:
    with open(os.path.join(CSRC, path), encoding="utf-8") as f:
        return f.read().split("\n")


def all_files(ext: str) -> list[str]:
    found = []
    for folder, _, names in os.walk(CSRC):
        for name in names:
            if name.endswith(ext):
                found.append(os.path.relpath(os.path.join(folder, name), CSRC).replace(os.sep, "/"))
    return sorted(found)


def resolve(including: str, name: str) -> str:
    """The path under csrc/ of an #include "name" in file `including`, as -Icsrc finds it."""
    beside = os.path.normpath(os.path.join(os.path.dirname(including), name)).replace(os.sep, "/")
    return beside if os.path.isfile(os.path.join(CSRC, beside)) else os.path.normpath(name)


def private_names() -> set[str]:
    """The functions and variables that cross a file: those the headers of csrc/ declare, less
    the exported ones (HS_EXPORT) and those defined in the header itself (static inline)."""
    names = set()
    for path in all_files(".h"):
        if os.path.basename(path) in VENDORED:
            continue
        for line in read(path):
            m = FUNCTION.match(line) or EXTERN.match(line)
            if m and not line.rstrip().endswith("{"):
                names.add(m.group(1))
    return names


class Amalgamation:
    def __init__(self):
        self.out: list[str] = []
        self.hoisted: list[str] = []
        self.seen: set[str] = set()
        self.header_macros: set[str] = set()
        self.private = private_names()

    def section(self, text: str) -> None:
        self.out.append(f"/************** {text} {'*' * max(3, 60 - len(text))}/")

    def static(self, line: str) -> str:
        """A declaration or definition of a private name, made static; a private variable's
        extern declaration dropped (its definition comes before its uses: ORDER)."""
        m = EXTERN.match(line)
        if m and m.group(1) in self.private:
            return commented(line)
        m = FUNCTION.match(line)
        if m and m.group(1) in self.private:
            return "static " + line
        m = re.match(
            r"^(?!static\b|extern\b|typedef\b)[A-Za-z_][\w \*]*?\b(\w+)(\[\])?\s*(=|;)", line
        )
        if m and m.group(1) in self.private:
            return "static " + line
        return line

    def copy(self, path: str) -> None:
        lines = read(path)
        is_c = path.endswith(".c")
        if is_c:
            lines = self.hoist(path, lines)
        own = []
        self.section(f"Begin file {path}")
        for line in lines:
            m = INCLUDE.match(line)
            if m:
                target = resolve(path, m.group(1))
                if target in self.seen:
                    self.out.append(commented(line))
                elif os.path.basename(target) in VENDORED:
                    self.seen.add(target)
                    self.out.append(line)
                else:
                    self.seen.add(target)
                    self.section(f"Include {target} in the middle of {path}")
                    self.copy(target)
                    self.section(f"Continuing where we left off in {path}")
                continue
            m = DEFINE.match(line)
            if m:
                name = m.group(1)
                if is_c:
                    if name in self.header_macros:
                        sys.exit(f"amalgamate: {path} defines {name}, which a header defines too")
                    own.append(name)
                else:
                    self.header_macros.add(name)
            self.out.append(self.static(line))
        for name in dict.fromkeys(own):
            self.out.append(f"#undef {name}")
        self.section(f"End of {path}")

    def hoist(self, path: str, lines: list[str]) -> list[str]:
        """Moves a #if block that sets a feature macro (_NAME) before the file's first include to
        the top of the amalgamation, where it precedes every system header."""
        first = next(i for i, line in enumerate(lines) if re.match(r"^\s*#\s*include", line))
        head = lines[:first]
        for i, line in enumerate(head):
            if re.match(r"^\s*#\s*define\s+_\w+", line):
                start = max(j for j in range(i + 1) if head[j].startswith("#if"))
                end = next(j for j in range(i, first) if head[j].startswith("#endif"))
                self.hoisted += [f"/* from {path} */", *head[start : end + 1]]
                return lines[:start] + lines[end + 1 :]
        return lines


def amalgamate() -> str:
    present = all_files(".c")
    if sorted(ORDER) != present:
        missing = sorted(set(present) - set(ORDER))
        gone = sorted(set(ORDER) - set(present))
        sys.exit(
            f"amalgamate: ORDER lacks {missing} and names missing files {gone}: add each .c "
            "file to ORDER in its layer"
        )
    a = Amalgamation()
    for path in ORDER:
        a.copy(path)
    head = [
        "/*",
        "** hybridsql: hybrid keyword + vector search for SQLite, as one C file.",
        "**",
        "** Generated by scripts/amalgamate.py from the files of csrc/; do not edit. One command",
        "** builds the loadable library, with SQLite's headers (sqlite3.h, sqlite3ext.h) beside:",
        "**",
        "**   cc -O3 -shared -fPIC -fvisibility=hidden -DHYBRIDSQL_VERSION='\"X.Y.Z\"' \\",
        "**      hybridsql.c -o hybridsql.so -lm",
        "**",
        "** csrc/hybridsql.c, below, says where each SQL function and its requirements are.",
        "*/",
        *a.hoisted,
    ]
    return "\n".join(head + a.out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/amalgamate.py OUT.c", file=sys.stderr)
        return 2
    with open(argv[0], "w", encoding="utf-8") as f:
        f.write(amalgamate())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
