"""Writing memories: add, supersede, reinforce, relate and delete, and get one back. A memory is
a ``chunks`` row, its vector and FTS entries, and a ``memories`` row; links go to
``memory_links``."""

import hashlib
import re

from hybridsql.errors import EmbeddingError, IndexingError, NotFoundError
from hybridsql.memory.records import (
    _MEMORY_SQL,
    RELATED_TO,
    SUPERSEDES,
    Memory,
    _check_id,
    _check_memory,
    _check_name,
    _check_text,
    _check_tier,
    _memory,
    transaction,
)
from hybridsql.memory.state import StoreState
from hybridsql.search import clean_text


class Writes(StoreState):
    """MemoryStore's writes (a mixin: ``conn``, ``index``, ``clock`` and ``max_chars`` are the
    store's, sessions are checked and linked by Sessions)."""

    def _check_size(self, content: str) -> None:
        if len(content) > self.max_chars:
            raise IndexingError(
                f"a memory holds at most {self.max_chars:,} characters, this one has "
                f"{len(content):,}: store a summary, or write the text to a file in the memory "
                "folder (HYBRIDSQL_MAX_MEMORY_CHARS raises the bound)"
            )

    def add(
        self,
        content: str,
        project: str = "",
        sector: str = "semantic",
        tier: str = "project",
        salience: float = 0.5,
        session_id: int | None = None,
        created_at: float | None = None,
    ) -> Memory:
        """Stores a memory with its vector; links it to ``session_id`` as created."""
        _check_memory(content, sector, salience)
        _check_name("project", project, empty=True)
        _check_tier(tier)
        self._check_size(content)
        content, project, tier = clean_text(content), clean_text(project), clean_text(tier)
        if session_id is not None:
            self.get_session(session_id)
        vector = self._embed(content)
        now = self.clock() if created_at is None else created_at
        with transaction(self.conn):
            memory_id = self._insert(content, project, sector, tier, salience, now, vector)
            self._link(session_id, memory_id, "created", now)
        return self.get(memory_id)

    def supersede(
        self,
        memory_id: int,
        content: str,
        session_id: int | None = None,
        created_by: str = "agent",
        sector: str | None = None,
        tier: str | None = None,
        salience: float | None = None,
    ) -> Memory:
        """Replaces a memory with a new one that SUPERSEDES it; the old one gets valid_until.

        The new memory keeps the old one's project, and its sector, tier and own salience (what
        recalls added stays with the old one) unless given. In ``session_id`` the new memory is
        linked as created, the old one as updated.
        """
        old = self._live(memory_id)
        if old.is_superseded:
            newer = self.conn.execute(
                "select from_id from memory_links where to_id = ? and relation = ?",
                (memory_id, SUPERSEDES),
            ).fetchone()
            by = f" by memory {newer[0]}" if newer else ""
            raise IndexingError(f"memory {memory_id} is already superseded{by}")
        sector = old.sector if sector is None else sector
        if tier is not None:  # a memory stored with another tier keeps it
            _check_tier(tier)
        tier = old.tier if tier is None else tier
        content = clean_text(content) if isinstance(content, str) else content
        if salience is None:
            salience = self.conn.execute(
                "select salience from memories where chunk_id = ?", (memory_id,)
            ).get
        _check_memory(content, sector, salience)
        self._check_size(content)
        _check_text("created_by", created_by, empty=True)
        if session_id is not None:
            self.get_session(session_id)
        vector = self._embed(content)
        now = self.clock()
        with transaction(self.conn):
            new_id = self._insert(content, old.project, sector, tier, salience, now, vector)
            self.conn.execute(
                "update memories set valid_until = ? where chunk_id = ?", (now, memory_id)
            )
            self.conn.execute(
                "insert into memory_links values (?, ?, ?, ?, ?)",
                (new_id, memory_id, SUPERSEDES, created_by, now),
            )
            self._link(session_id, new_id, "created", now)
            self._link(session_id, memory_id, "updated", now)
        return self.get(new_id)

    def reinforce(
        self, memory_id: int, amount: float = 0.1, session_id: int | None = None
    ) -> Memory:
        """Raises a memory's own salience by ``amount`` (capped at 1), for good: unlike what
        recalls add, it does not relax. Links it as reinforced."""
        self._live(memory_id)
        if not 0 < amount <= 1:
            raise IndexingError(f"amount must be in (0, 1], not {amount!r}")
        if session_id is not None:
            self.get_session(session_id)
        now = self.clock()
        with transaction(self.conn):
            self.conn.execute(
                "update memories set salience = min(1.0, salience + ?) where chunk_id = ?",
                (amount, memory_id),
            )
            self._link(session_id, memory_id, "reinforced", now)
        return self.get(memory_id)

    def relate(
        self,
        from_id: int,
        to_id: int,
        relation: str = RELATED_TO,
        created_by: str = "agent",
    ) -> None:
        """Records that memory ``from_id`` has ``relation`` to memory ``to_id``."""
        self._live(from_id)
        self._live(to_id)
        if from_id == to_id:
            raise IndexingError(f"memory {from_id} cannot be related to itself")
        if not re.fullmatch(r"[A-Z][A-Z_]*", relation):
            raise IndexingError(f"relation must be upper case, like RELATED_TO, not {relation!r}")
        _check_text("created_by", created_by, empty=True)
        with transaction(self.conn):
            self.conn.execute(
                "insert or ignore into memory_links values (?, ?, ?, ?, ?)",
                (from_id, to_id, relation, created_by, self.clock()),
            )

    def delete(self, memory_id: int, hard: bool = False) -> None:
        """Marks a memory deleted: no search or timeline shows it again.

        ``hard`` removes it from the database instead, with its vector, FTS entries and links,
        and its text's vectors in the embedding cache unless another chunk has the same text
        (that chunk's next re-index would embed it again for nothing, and the cache holds
        nothing that the chunk does not show already); a memory marked deleted before can be
        removed so, its text purged.
        """
        memory = self.get(memory_id) if hard else self._live(memory_id)
        with transaction(self.conn):
            if hard:
                self.conn.execute("delete from chunks where id = ?", (memory_id,))
                self._forget_embedding(memory.content)
            else:
                self.conn.execute(
                    "update memories set deleted = 1 where chunk_id = ?", (memory_id,)
                )

    def get(self, memory_id: int) -> Memory:
        """The memory with this id, deleted or not."""
        _check_id("memory", memory_id)
        row = self.conn.execute(f"{_MEMORY_SQL} where m.chunk_id = ?", (memory_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no memory with id {memory_id}")
        return self._recalled([_memory(row)])[0]

    def _live(self, memory_id: int) -> Memory:
        memory = self.get(memory_id)
        if memory.deleted:
            raise NotFoundError(f"memory {memory_id} is deleted")
        return memory

    def _embed(self, content: str):
        if self.index.missing is not None:  # the index's model, which cannot be found here
            raise EmbeddingError(self.index.missing)
        embedder = self.index.embedder
        return None if embedder is None else embedder.embed([content])[0]

    def _insert(self, content, project, sector, tier, salience, created_at, vector) -> int:
        conn = self.conn
        conn.execute(
            "insert into chunks(kind, file_id, path, text, created_at)"
            " values ('memory', null, '', ?, ?)",
            (content, created_at),
        )
        memory_id = conn.last_insert_rowid()
        conn.execute(
            "insert into memories(chunk_id, project, sector, tier, salience, created_at)"
            " values (?, ?, ?, ?, ?, ?)",
            (memory_id, project, sector, tier, salience, created_at),
        )
        if vector is not None:
            self.index.record_model(len(vector))
            conn.execute(
                "insert into vectors(chunk_id, vector, model_id, kind) values (?, ?, ?, 'memory')",
                (memory_id, vector.astype("<f4").tobytes(), self.index.embedder.model_id),
            )
        return memory_id

    def _forget_embedding(self, text: str) -> None:
        """Drops every model's cached vector of ``text``, unless a chunk still has that text."""
        used = "select exists(select 1 from chunks where text = ?)"
        if self.conn.execute(used, (text,)).get:
            return
        cache = "select count(*) from sqlite_schema where name = 'embedding_cache'"
        if self.conn.execute(cache).get:
            key = hashlib.sha256(text.encode("utf-8")).digest()
            self.conn.execute("delete from embedding_cache where text_sha256 = ?", (key,))
        if self.index.embedder is not None:
            self.index.embedder.forget(text)
