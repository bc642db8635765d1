"""Reading memories in time: a memory's neighbours in its project (timeline), and a project's
latest memories (recent)."""

from hybridsql.memory.records import (
    _MEMORY_SQL,
    TimelineEntry,
    _check_count,
    _check_name,
    _memory,
)
from hybridsql.memory.state import StoreState
from hybridsql.search import clean_text


class Timeline(StoreState):
    """MemoryStore's timelines (a mixin: ``conn`` is the store's; memories come from Writes,
    their sessions from Sessions)."""

    def timeline(self, anchor_id: int, before: int = 5, after: int = 5) -> list:
        """The anchor and the memories of its project just before and after it in time, oldest
        first, each with the session that created it (TimelineEntry, offset 0 for the anchor)."""
        _check_count("before", before, 0)
        _check_count("after", after, 0)
        anchor = self._live(anchor_id)
        sql = (
            f"{_MEMORY_SQL} where m.project = ? and m.deleted = 0"
            " and (m.created_at, m.chunk_id) {op} (?, ?)"
            " order by m.created_at {order}, m.chunk_id {order} limit ?"
        )
        key = (anchor.project, anchor.created_at, anchor.id)
        earlier = self.conn.execute(sql.format(op="<", order="desc"), (*key, before)).fetchall()
        later = self.conn.execute(sql.format(op=">", order="asc"), (*key, after)).fetchall()
        memories = self._recalled([_memory(r) for r in reversed(earlier)]) + [anchor]
        memories += self._recalled([_memory(r) for r in later])
        return [
            TimelineEntry(offset, memory, self._source_session(memory.id))
            for offset, memory in enumerate(memories, -len(earlier))
        ]

    def recent(self, project: str, limit: int = 10, include_superseded: bool = False) -> list:
        """The latest memories of ``project``, newest first, each with the session that created
        it (TimelineEntry, offset 0 the newest, -1 the one before); reads, reinforces nothing."""
        _check_count("limit", limit, 1)
        _check_name("project", project, empty=True)
        kept = "" if include_superseded else " and m.valid_until is null"
        rows = self.conn.execute(
            f"{_MEMORY_SQL} where m.project = ? and m.deleted = 0{kept}"
            " order by m.created_at desc, m.chunk_id desc limit ?",
            (clean_text(project), limit),
        ).fetchall()
        memories = self._recalled([_memory(r) for r in rows])
        return [
            TimelineEntry(-n, memory, self._source_session(memory.id))
            for n, memory in enumerate(memories)
        ]
