"""Sessions: opening and closing them, and the links between a session and the memories it
created, used, updated or recalled (``session_memories``)."""

from hybridsql.errors import NotFoundError
from hybridsql.memory.records import (
    _SESSION_SQL,
    _SOURCE_SESSION,
    Session,
    SessionContext,
    _check_id,
    _check_name,
    _check_text,
    transaction,
)
from hybridsql.memory.state import StoreState


class Sessions(StoreState):
    """MemoryStore's sessions (a mixin: ``conn`` and ``clock`` are the store's)."""

    def start_session(self, project: str = "") -> Session:
        """Opens a session; memories it creates or uses are linked to it."""
        _check_name("project", project, empty=True)
        with transaction(self.conn):
            self.conn.execute(
                "insert into sessions(project, started_at) values (?, ?)", (project, self.clock())
            )
            session_id = self.conn.last_insert_rowid()
        return self.get_session(session_id)

    def end_session(self, session_id: int, summary: str = "") -> Session:
        """Closes a session, with a summary of what it did."""
        _check_text("summary", summary, empty=True)
        self.get_session(session_id)
        with transaction(self.conn):
            self.conn.execute(
                "update sessions set ended_at = ?, summary = ? where id = ?",
                (self.clock(), summary, session_id),
            )
        return self.get_session(session_id)

    def get_session(self, session_id: int) -> Session:
        _check_id("session", session_id)
        row = self.conn.execute(f"{_SESSION_SQL} where id = ?", (session_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no session with id {session_id}")
        return Session(*row)

    def session_context(self, memory_id: int) -> SessionContext | None:
        """The latest session link of a memory, or None when no session has used it."""
        self._live(memory_id)
        row = self.conn.execute(
            "select session_id, usage, at from session_memories where memory_id = ?"
            " order by at desc, rowid desc limit 1",
            (memory_id,),
        ).fetchone()
        if row is None:
            return None
        count = self.conn.execute(
            "select count(distinct l.memory_id) from session_memories l"
            " join memories m on m.chunk_id = l.memory_id where l.session_id = ? and m.deleted = 0",
            (row[0],),
        ).get
        return SessionContext(self.get_session(row[0]), row[1], row[2], count)

    def _link(self, session_id, memory_id, usage, at) -> None:
        if session_id is not None:
            self.conn.execute(
                "insert into session_memories(session_id, memory_id, usage, at)"
                " values (?, ?, ?, ?)",
                (session_id, memory_id, usage, at),
            )

    def _source_session(self, memory_id: int) -> Session | None:
        row = self.conn.execute(
            f"{_SESSION_SQL} where id = {_SOURCE_SESSION.format(id='?')}", (memory_id,)
        ).fetchone()
        return Session(*row) if row else None
