"""The memory folder: extract_memory appends a markdown entry to today's note and indexes it,
writing only inside the folder."""

import errno
import os
import re
import stat
from datetime import datetime

from hybridsql.errors import IndexingError
from hybridsql.files.discovery import link_reason, open_inside
from hybridsql.memory.records import (
    MAX_TAGS,
    ExtractedEntry,
    _check_text,
    _one_line,
    _shown,
)
from hybridsql.memory.state import StoreState
from hybridsql.search import clean_text


class Folder(StoreState):
    """MemoryStore's memory folder (a mixin: ``memory_dir``, ``index``, ``conn`` and ``clock``
    are the store's)."""

    def extract_memory(
        self, topic: str, title: str, content: str, tags: list | None = None
    ) -> ExtractedEntry:
        """Appends an entry to today's ``memory/YYYY-MM-DD.md`` and indexes it at once.

        The entry is a ``## title`` section, then ``- topic:``, ``- tags:`` and ``- time:``
        lines, a blank line and the content; headings in the content move down to ``###`` so
        the entry stays one section.
        """
        if self.memory_dir is None:
            raise IndexingError("no memory folder is configured (memory_dir)")
        title, topic = _one_line("title", title), _one_line("topic", topic)
        _check_text("content", content)
        self._check_size(content)
        content = clean_text(content)
        tags = [] if tags is None else tags
        if not isinstance(tags, list) or len(tags) > MAX_TAGS:
            raise IndexingError(
                f"tags must be a list of at most {MAX_TAGS} tags, not {_shown(tags)}"
            )
        tags = [_one_line("tag", t) for t in tags]
        if any("," in t for t in tags):
            raise IndexingError(f"a tag cannot contain a comma: {tags!r}")
        stamp = datetime.fromtimestamp(self.clock())
        rel = f"memory/{stamp:%Y-%m-%d}.md"
        body = re.sub(r"(?m)^ {0,3}#{1,2}(?=[ \t]|$)", "###", content.strip())
        lines = [f"## {title}", f"- topic: {topic}"]
        lines += [f"- tags: {', '.join(tags)}"] if tags else []
        lines += [f"- time: {stamp:%H:%M}", "", *body.splitlines()]
        try:
            with open(self._note_fd(self.memory_dir, rel), "r+b") as f:
                existing = f.read().decode("utf-8", errors="replace")
                if not existing.strip():
                    before = f"# {stamp:%Y-%m-%d}\n\n"
                else:  # one blank line between entries
                    trailing = len(existing) - len(existing.rstrip("\n"))
                    before = "\n" * max(0, 2 - trailing)
                start = (existing + before).count("\n") + 1
                f.write((before + "\n".join(lines) + "\n").encode("utf-8"))
        except OSError as e:
            why = link_reason(self.memory_dir, e) or e.strerror
            raise IndexingError(
                f"cannot write {rel} in the memory folder {self.memory_dir}: {why}"
            ) from e
        self.index.index_folder(self.memory_dir)
        end = start + len(lines) - 1
        chunk_ids = [
            r[0]
            for r in self.conn.execute(
                "select c.id from chunks c join files f on f.id = c.file_id"
                " where f.root = ? and f.path = ? and c.end_line >= ? and c.start_line <= ?"
                " order by c.start_line",
                (os.path.abspath(self.memory_dir), rel, start, end),
            )
        ]
        return ExtractedEntry(rel, start, end, chunk_ids)

    def _note_fd(self, folder: str, rel: str) -> int:
        """The note ``rel`` in the memory folder ``folder``, opened to read and append, made with
        its folders if missing. Nothing on the way may be a symbolic link, and the note must be a
        regular file (OSError otherwise), so that writes stay inside the memory folder."""
        os.makedirs(folder, exist_ok=True)
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
        fd = open_inside(folder, rel, flags, make_dirs=True)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
        return fd
