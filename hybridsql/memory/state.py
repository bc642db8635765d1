"""StoreState: what every part of MemoryStore shares, declared once for readers and type
checkers (each part is a mixin of store.py's MemoryStore)."""

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # apsw and the index are imported on first use
    import apsw

    from hybridsql.indexing.index import HybridIndex
    from hybridsql.memory.ranking import Ranking
    from hybridsql.memory.records import Memory, Session
    from hybridsql.search import SearchOptions


class StoreState:
    """What every part of MemoryStore (writes, sessions, timeline, recall, folder) shares: the
    state MemoryStore.__init__ sets, and the methods one part calls on another, declared once
    here for readers and type checkers."""

    index: "HybridIndex"
    conn: "apsw.Connection"
    memory_dir: str | None
    ranking: "Ranking"
    options: "SearchOptions"
    document_options: "SearchOptions"
    clock: Callable[[], float]
    max_chars: int

    if TYPE_CHECKING:  # defined by one part (the module named), called by another

        def get(self, memory_id: int) -> Memory: ...  # writes

        def _check_size(self, content: str) -> None: ...  # writes

        def _live(self, memory_id: int) -> Memory: ...  # writes

        def get_session(self, session_id: int) -> Session: ...  # sessions

        def _link(self, session_id, memory_id, usage, at) -> None: ...  # sessions

        def _source_session(self, memory_id: int) -> Session | None: ...  # sessions

        def start_session(self, project: str = "") -> Session: ...  # sessions

        def _recalled(self, memories: list) -> list: ...  # recall
