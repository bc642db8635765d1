"""LangChain: a VectorStore over a hybridsql index, its retriever, and the local model as
LangChain Embeddings (``pip install "hybridsql[langchain]"``).

The retriever's default search is the one hybrid statement (keywords and vectors fused in SQL);
``similarity`` (vectors), ``mmr`` and ``keyword`` are the other search types. Filters follow
LangChain's conventions (``{"genre": "sf"}``, ``{"year": {"$gte": 2000}}``, ``$in``, ``$nin``,
``$ne``, ``$exists``, ``$like``, ``$contains``, ``$and``, ``$or``, ``$not``) and become part of
the statement, applied before the top k. What the store writes is an ordinary index
(documents.py): ``hybridsql search``, the MCP server, Datasette and the stock shell read it.
"""

from collections import abc
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever
from langchain_core.vectorstores.utils import maximal_marginal_relevance
from pydantic import Field

from hybridsql.errors import QueryError
from hybridsql.integrations.documents import Collection, Cond, Found, Logic, new_ids

SEARCH_TYPES = ("hybrid", "similarity", "mmr", "keyword")
_OPS = {
    "$eq": "=",
    "$ne": "!=",
    "$gt": ">",
    "$gte": ">=",
    "$lt": "<",
    "$lte": "<=",
    "$in": "in",
    "$nin": "nin",
    "$like": "like",
    "$exists": "exists",
    "$contains": "contains",
}


def parse_filter(spec: dict | None) -> Cond | Logic | None:
    """A LangChain filter (a dict of fields and operators) as documents.py's tree."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise QueryError(f"a filter is a dict, not {type(spec).__name__}")
    parts: list = []
    for key, value in spec.items():
        if key in ("$and", "$or"):
            if not isinstance(value, list):
                raise QueryError(f"{key} takes a list of filters")
            parts.append(Logic(key[1:], [parse_filter(v) for v in value]))
        elif key == "$not":
            parts.append(Logic("not", [parse_filter(value)]))
        elif key.startswith("$"):
            raise QueryError(f"unknown filter operator {key!r}")
        elif isinstance(value, dict):
            for op, operand in value.items():
                if op not in _OPS:
                    raise QueryError(f"filter on {key!r}: unknown operator {op!r}")
                parts.append(Cond(key, _OPS[op], operand))
        else:
            parts.append(Cond(key, "=", value))
    return parts[0] if len(parts) == 1 else Logic("and", parts)


class HybridSQLEmbeddings(Embeddings):
    """hybridsql's local model as LangChain Embeddings: ``model`` names it (all-MiniLM-L6-v2,
    multilingual-e5-small, a converted model's id, a model file or a Hugging Face folder); the
    vectors ``hybridsql index`` writes, so the CLI's hybrid search finds what a store wrote
    with it. Named by neither ``model`` nor ``provider``, it runs, in a store, the model that
    the store's index was made by (else the default)."""

    def __init__(self, provider: Any = None, model: Any = None) -> None:
        from hybridsql.embedding.embedder import LocalProvider

        if provider is not None and model is not None:
            raise QueryError("give provider= or model=, not both")
        self.named = provider is not None or model is not None
        self.provider = provider or LocalProvider(model=model)
        self.model_id = self.provider.model_id

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.provider.embed(list(texts)).tolist() if texts else []

    def embed_query(self, text: str) -> list[float]:
        embed = self.provider.embed
        if getattr(self.provider, "roles", False):  # a query prefix of its own (e5's)
            return embed([text], role="query")[0].tolist()
        return embed([text])[0].tolist()


def _local_embedding(index: Any, embedding: Embeddings | None, model: Any) -> Any:
    """The store's embeddings: hybridsql's local model where ``model`` names it, or where the
    HybridSQLEmbeddings given names none (the index's model, else the default); checked
    against the model the index was made by."""
    from hybridsql.db.schema import recorded_model
    from hybridsql.embedding.choice import check

    if model is not None:
        if embedding is not None:
            raise QueryError("give embedding= or model= (hybridsql's local model), not both")
        embedding = HybridSQLEmbeddings(model=model)
    if not isinstance(embedding, HybridSQLEmbeddings):
        return embedding
    recorded = recorded_model(index.conn)
    if not embedding.named and recorded is not None and recorded["provider"] == "local":
        embedding = HybridSQLEmbeddings(model=recorded["model_id"])
    check(recorded, embedding.provider, False, index.db_path)
    return embedding


def _model_id(embedding: Embeddings | None) -> str | None:
    """The model id vectors are stored under: the embeddings' own, else its class's name."""
    if embedding is None:
        return None
    own = getattr(embedding, "model_id", None)
    if isinstance(own, str) and own:
        return own
    return f"langchain:{type(embedding).__name__}"


# The index file a store opens when none is named: in the current folder, as SQLiteVec's
# db_file is ("vec.db"), under a name of its own (a SQLiteVec file is no hybridsql index).
DEFAULT_DB_PATH = "hybridsql.db"
# from_texts' own arguments, and SQLiteVec's names of two of them.
_FROM_TEXTS = ("metadatas", "ids", "db_path", "collection", "index")
_SQLITEVEC_NAMES = {"db_file": "db_path", "table": "collection"}


class HybridSQLVectorStore(VectorStore):
    """Documents with ids and metadata in a hybridsql index at ``db_path`` (made if missing;
    by default ``hybridsql.db`` in the current folder), in the collection ``collection``;
    ``embedding`` makes their vectors (None: keyword-only), or ``model`` names hybridsql's local
    model to make them (HybridSQLEmbeddings(model=model)). A HybridSQLEmbeddings named by
    neither runs the model the index was made by; hybridsql's models are recorded in the index
    as the CLI's are, and another one than the index's is a ModelMismatchError. ``index``: an
    open HybridIndex to use instead of opening ``db_path``."""

    def __init__(
        self,
        db_path: str | None = None,
        embedding: Embeddings | None = None,
        collection: str = "langchain",
        *,
        index: Any = None,
        model: Any = None,
    ) -> None:
        from hybridsql.indexing.index import HybridIndex

        if index is None:
            index = HybridIndex(DEFAULT_DB_PATH if db_path is None else db_path, embedder="none")
        self.index = index
        self.embedding = embedding = _local_embedding(index, embedding, model)
        provider = embedding.provider if isinstance(embedding, HybridSQLEmbeddings) else None
        self.collection = Collection(
            index,
            collection,
            embedding.embed_documents if embedding else None,
            embedding.embed_query if embedding else None,
            _model_id(embedding),
            (lambda dims: index.record_model(dims, provider)) if provider is not None else None,
        )

    @property
    def embeddings(self) -> Embeddings | None:
        return self.embedding

    def close(self) -> None:
        self.index.close()

    # ---- writing ----

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Adds (or replaces, by id) texts; an id that is None or missing is made (new_ids)."""
        texts = list(texts)
        metadatas = metadatas or [{} for _ in texts]
        given = list(ids) if ids is not None else [None] * len(texts)
        if len(given) != len(texts):
            raise QueryError(f"{len(given)} ids for {len(texts)} texts")
        made = iter(new_ids(sum(1 for i in given if not i)))
        return self.collection.add(texts, metadatas, [i if i else next(made) for i in given])

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Deletes the documents with these ids, or those ``filter=`` selects; True."""
        where = kwargs.get("filter")
        if ids is None and where is None:
            raise QueryError("delete takes ids or filter=; to empty the collection, use clear()")
        self.collection.delete(ids, parse_filter(where) if ids is None else None)
        return True

    def clear(self) -> None:
        """Deletes every document of the collection."""
        self.collection.clear()

    # ---- reading ----

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return [
            Document(page_content=text, metadata=meta, id=doc_id)
            for doc_id, text, meta in self.collection.get(ids)
        ]

    @staticmethod
    def _document(found: Found) -> Document:
        return Document(page_content=found.text, metadata=found.metadata, id=found.id)

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The k documents nearest to the query's vector, with their cosine."""
        if self.embedding is None:
            return []
        return self.similarity_search_with_score_by_vector(
            self.embedding.embed_query(query), k, filter
        )

    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The k documents nearest to ``embedding``, with their cosine (LangChain's name, as
        SQLiteVec, FAISS and Chroma spell it)."""
        found = self.collection.nearest(embedding, k, parse_filter(filter))
        return [(self._document(f), f.score) for f in found]

    # This store's name for it before it took LangChain's.
    similarity_search_by_vector_with_score = similarity_search_with_score_by_vector

    def get_dimensionality(self) -> int:
        """How many dimensions the store's embeddings give (SQLiteVec's method): the length of
        a vector they make."""
        if self.embedding is None:
            raise QueryError("a store without embeddings (keyword-only) has no dimensionality")
        return len(self.embedding.embed_query("dimensionality"))

    def similarity_search(
        self, query: str, k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, filter)]

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score_by_vector(embedding, k, filter)]

    def hybrid_search_with_score(
        self, query: str, k: int = 4, filter: dict | None = None, **options: Any
    ) -> list[tuple[Document, float]]:
        """The k best documents by the one hybrid statement (``options``: SearchOptions'
        fields, such as vector_weight or fusion), with their fused score."""
        found = self.collection.search(query, k, "hybrid", parse_filter(filter), **options)
        return [(self._document(f), f.score) for f in found]

    def hybrid_search(
        self, query: str, k: int = 4, filter: dict | None = None, **options: Any
    ) -> list[Document]:
        return [d for d, _ in self.hybrid_search_with_score(query, k, filter, **options)]

    def keyword_search(
        self, query: str, k: int = 4, filter: dict | None = None, **options: Any
    ) -> list[Document]:
        """The k best documents by their words alone (FTS5 bm25)."""
        found = self.collection.search(query, k, "keyword", parse_filter(filter), **options)
        return [self._document(f) for f in found]

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        if self.embedding is None:
            return []
        return self.max_marginal_relevance_search_by_vector(
            self.embedding.embed_query(query), k, fetch_k, lambda_mult, filter
        )

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        import numpy as np

        found = self.collection.nearest(embedding, max(fetch_k, k), parse_filter(filter))
        if not found:
            return []
        stored = self.collection.vectors([f.id for f in found])
        picks = maximal_marginal_relevance(
            np.asarray(embedding, dtype=np.float32),
            [stored[f.id] for f in found],
            lambda_mult=lambda_mult,
            k=k,
        )
        return [self._document(found[i]) for i in picks]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        # LangChain's relevance for cosine is 1 - the cosine distance (its
        # _cosine_relevance_score_fn), which is the cosine itself: the score these searches
        # return. So similarity_score_threshold=0.3 keeps documents whose cosine is 0.3 or
        # more, as in LangChain's other stores (and LlamaIndex's similarity).
        return lambda cosine: cosine

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        db_path: str | None = None,
        collection: str = "langchain",
        index: Any = None,
        **kwargs: Any,
    ) -> "HybridSQLVectorStore":
        """A store of ``texts``, at ``db_path`` (by default ``hybridsql.db`` in the current
        folder) or in ``index``; SQLiteVec's ``db_file`` and ``table`` are taken for
        ``db_path`` and ``collection``."""
        for name, ours in _SQLITEVEC_NAMES.items():
            if name not in kwargs:
                continue
            value = kwargs.pop(name)
            if ours == "db_path" and db_path is None:
                db_path = value
            elif ours == "collection" and collection == "langchain":
                collection = value
            else:
                raise QueryError(f"from_texts: {name} is SQLiteVec's name of {ours}: give one")
        if kwargs:
            raise QueryError(
                f"from_texts takes {', '.join(_FROM_TEXTS)} (SQLiteVec's db_file and table as"
                f" db_path and collection), not {', '.join(sorted(kwargs))}"
            )
        store = cls(db_path, embedding, collection, index=index)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    def as_retriever(self, **kwargs: Any) -> "HybridSQLRetriever":
        """The retriever: ``search_type`` hybrid (default), similarity, mmr, keyword (or
        LangChain's similarity_score_threshold); ``k``, ``filter``, ``fetch_k``,
        ``lambda_mult``, ``search_options`` (SearchOptions' fields for hybrid and keyword), or
        LangChain's ``search_kwargs`` dict of them."""
        return HybridSQLRetriever(vectorstore=self, **kwargs)


class HybridSQLRetriever(VectorStoreRetriever):
    """Documents for a query from a HybridSQLVectorStore: by default the one hybrid statement.
    ``k``, ``filter``, ``fetch_k``, ``lambda_mult`` and ``search_options`` (SearchOptions'
    fields, for hybrid and keyword) are fields, and ``search_kwargs`` is read as LangChain's
    own retriever reads it; an invoke's keyword arguments come first."""

    vectorstore: HybridSQLVectorStore
    search_type: str = "hybrid"
    allowed_search_types: ClassVar[abc.Collection[str]] = (
        *SEARCH_TYPES,
        "similarity_score_threshold",
    )
    k: int = 4
    filter: dict | None = None
    fetch_k: int = 20
    lambda_mult: float = 0.5
    search_options: dict = Field(default_factory=dict)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        if self.search_type == "similarity_score_threshold":
            return super()._get_relevant_documents(query, run_manager=run_manager, **kwargs)
        given = {**self.search_kwargs, **kwargs}
        k = given.pop("k", self.k)
        where = given.pop("filter", self.filter)
        store = self.vectorstore
        if self.search_type == "similarity":
            return store.similarity_search(query, k, where)
        if self.search_type == "mmr":
            fetch_k = given.pop("fetch_k", self.fetch_k)
            lambda_mult = given.pop("lambda_mult", self.lambda_mult)
            return store.max_marginal_relevance_search(query, k, fetch_k, lambda_mult, where)
        options = {**self.search_options, **given}
        if self.search_type == "keyword":
            return store.keyword_search(query, k, where, **options)
        return store.hybrid_search(query, k, where, **options)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        # SQLite answers from this process: the sync search, off the event loop's thread.
        sync = run_manager.get_sync()
        return await run_in_executor(
            None, lambda: self._get_relevant_documents(query, run_manager=sync, **kwargs)
        )
