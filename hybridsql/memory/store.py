"""MemoryStore: an agent's memories, sessions and memory folder in a HybridIndex, its methods
gathered from one mixin per concern (writes, sessions, timeline, recall, folder)."""

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from hybridsql.errors import QueryError
from hybridsql.locking import one_call_at_a_time
from hybridsql.memory.folder import Folder
from hybridsql.memory.ranking import Ranking
from hybridsql.memory.recall import Recall
from hybridsql.memory.records import _max_memory_chars
from hybridsql.memory.sessions import Sessions
from hybridsql.memory.timeline import Timeline
from hybridsql.memory.writes import Writes
from hybridsql.search import SearchOptions

if TYPE_CHECKING:  # imported on first use
    from hybridsql.indexing.index import HybridIndex


@one_call_at_a_time
class MemoryStore(Writes, Sessions, Timeline, Recall, Folder):
    """An agent's memories and sessions in a HybridIndex, and the memory folder it writes to.
    Threads may share it: its methods run one at a time, under its index's lock.

    ``index`` is a HybridIndex, or the path of one, opened with ``model`` (a local model's name
    or path, as HybridIndex takes it; by default the model the index was made by); the store's
    memories are embedded, and searched, with its index's model. ``options`` are the
    SearchOptions memory searches start from (backend, candidate pool, vector floor...);
    ``document_options`` those of document searches. ``clock`` gives the time in unix seconds.
    ``max_chars`` bounds what one memory (or one note extract_memory writes) may hold: default
    $HYBRIDSQL_MAX_MEMORY_CHARS, else MAX_MEMORY_CHARS.
    """

    def __init__(
        self,
        index: "HybridIndex | str | os.PathLike",
        memory_dir: str | None = None,
        ranking: Ranking | None = None,
        options: SearchOptions | None = None,
        document_options: SearchOptions | None = None,
        clock: Callable[[], float] = time.time,
        max_chars: int | None = None,
        model: "str | os.PathLike | None" = None,
    ):
        if isinstance(index, (str, os.PathLike)):
            from hybridsql.indexing.index import HybridIndex

            index = HybridIndex(os.fspath(index), model=model)
        elif model is not None:
            raise QueryError(
                "model= opens an index by its path; a HybridIndex given has its model already"
                " (HybridIndex(path, model=...))"
            )
        self.max_chars = _max_memory_chars() if max_chars is None else max_chars
        self.index = index
        self.lock = index.lock  # one connection, one lock: the index's calls wait for the store's
        self.conn = index.conn
        self.memory_dir = memory_dir
        self.ranking = ranking or Ranking()
        self.ranking.check()
        self.options = options or SearchOptions(prefix=True, min_score=0.0)
        self.document_options = document_options or SearchOptions(prefix=True)
        self.clock = clock
