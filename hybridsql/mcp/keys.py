"""Keys of the HTTP memory server: which projects a bearer key reaches, and whether it may write.

A key file (``hybridsql mcp --http ... --keys FILE``) has one key a line::

    # key                               scope  projects
    3f9c1e7a5b2d4c6e8f0a1b2c3d4e5f60    read   alpha
    9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d    write  alpha beta
    0f1e2d3c4b5a69788796a5b4c3d2e1f0    write  *

A key is 16 to 256 printable characters without spaces; the scope is ``read`` (search, recent,
timeline: a read-only key's searches reinforce nothing) or ``write`` (everything); the projects
are names, or ``*`` for all of them. Blank lines and lines starting with ``#`` are ignored. The
file is read again when it changes (its size, time or inode), at the next request: a file that
no longer parses keeps the keys read before, and the server says so once on stderr. Keys are
kept as SHA-256 digests and compared in constant time; no key is ever logged.
"""

import hashlib
import os
import secrets
import sys
import threading
from dataclasses import dataclass

from hybridsql.errors import HybridSQLError

MIN_KEY, MAX_KEY = 16, 256
SCOPES = ("read", "write")


class KeyFileError(HybridSQLError):
    """A key file cannot be read or has a line that is not ``KEY SCOPE PROJECT...``."""


@dataclass(frozen=True)
class Grant:
    """What one key reaches: ``projects`` (None: every project) and whether it may write."""

    projects: frozenset | None
    write: bool

    def covers(self, project: str | None) -> bool:
        return self.projects is None or (project is not None and project in self.projects)

    def describe(self) -> str:
        return "every project" if self.projects is None else ", ".join(sorted(self.projects))


# The grant of the single --token, and of a loopback server with neither: everything.
EVERYTHING = Grant(None, True)


def digest(key: str | bytes) -> bytes:
    return hashlib.sha256(key.encode() if isinstance(key, str) else key).digest()


def parse(text: str, path: str, check_project) -> dict[bytes, Grant]:
    """The grants of a key file's text, by the digest of their key; KeyFileError names the
    first bad line (never its key)."""
    grants: dict[bytes, Grant] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        where = f"{path} line {number}"
        if len(words) < 3:
            raise KeyFileError(f"{where}: expected KEY SCOPE PROJECT..., found {len(words)} words")
        key, scope, projects = words[0], words[1], words[2:]
        if not MIN_KEY <= len(key) <= MAX_KEY or not key.isprintable():
            raise KeyFileError(
                f"{where}: a key is {MIN_KEY} to {MAX_KEY} printable characters, not {len(key)}"
            )
        if scope not in SCOPES:
            raise KeyFileError(f"{where}: the scope is read or write, not {scope[:20]!r}")
        if "*" in projects and len(projects) > 1:
            raise KeyFileError(f"{where}: '*' (every project) stands alone")
        for project in projects:
            if project != "*":
                try:
                    check_project(project)
                except HybridSQLError as e:
                    raise KeyFileError(f"{where}: {e}") from None
        if digest(key) in grants:
            raise KeyFileError(f"{where}: this key is also on an earlier line")
        grants[digest(key)] = Grant(
            None if projects == ["*"] else frozenset(projects), scope == "write"
        )
    if not grants:
        raise KeyFileError(f"{path} holds no key: add a line KEY SCOPE PROJECT...")
    return grants


class Keys:
    """A key file, read at start and again whenever it changes."""

    def __init__(self, path: str, check_project):
        self.path, self.check_project = path, check_project
        self.lock = threading.Lock()
        self.stamp = None
        self.grants: dict[bytes, Grant] = {}
        self.refresh(first=True)

    def _stamp(self):
        st = os.stat(self.path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def refresh(self, first: bool = False) -> None:
        """Reads the file again if it changed; on the first read an error is raised, later it
        is said once and the keys read before stay."""
        try:
            stamp = self._stamp()
            if stamp == self.stamp:
                return
            with open(self.path, encoding="utf-8") as f:
                grants = parse(f.read(), self.path, self.check_project)
        except (OSError, UnicodeDecodeError, KeyFileError) as e:
            why = str(e) if isinstance(e, KeyFileError) else f"cannot read {self.path}: {e}"
            if first:
                raise KeyFileError(why) from None
            if why != getattr(self, "_said", None):
                self._said = why
                print(f"hybridsql mcp: {why}; keeping the keys read before", file=sys.stderr)
            return
        with self.lock:
            self.stamp, self.grants = stamp, grants
        self._said = None

    def grant(self, authorization: bytes) -> Grant | None:
        """The grant of an ``Authorization: Bearer KEY`` header's value, None for no key of
        this file. The key's digest is compared with every known one, each in constant time."""
        self.refresh()
        scheme, _, key = authorization.partition(b" ")
        if scheme.lower() != b"bearer" or not key:
            return None
        wanted = digest(key.strip())
        with self.lock:
            for known, grant in self.grants.items():
                if secrets.compare_digest(known, wanted):
                    return grant
        return None
