"""LlamaIndex: a vector store over a hybridsql index, and the local model as a LlamaIndex
embedding (``pip install "hybridsql[llamaindex]"``).

Query modes: DEFAULT (the k nearest vectors, exact), HYBRID (the one hybrid statement; ``alpha``
is the vector weight, 1 - alpha the keyword weight), TEXT_SEARCH (keywords alone) and MMR.
MetadataFilters (every operator, nested, AND, OR and NOT) are written into the statement and
applied before the top k. A node's text, metadata and relationships are stored as LlamaIndex
writes them (node_to_metadata_dict) and come back intact. What the store writes is an ordinary
index (documents.py): the CLI, the MCP server, Datasette and the shell read it.
"""

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.indices.query.embedding_utils import get_top_k_mmr_embeddings
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict

from hybridsql.errors import QueryError
from hybridsql.integrations.documents import ID, Collection, Cond, Logic

_OPS = {
    FilterOperator.EQ: "=",
    FilterOperator.NE: "!=",
    FilterOperator.GT: ">",
    FilterOperator.GTE: ">=",
    FilterOperator.LT: "<",
    FilterOperator.LTE: "<=",
    FilterOperator.IN: "in",
    FilterOperator.NIN: "nin",
    FilterOperator.CONTAINS: "contains",
    FilterOperator.TEXT_MATCH: "text",
    FilterOperator.TEXT_MATCH_INSENSITIVE: "like",
}


def parse_filters(filters: MetadataFilters | MetadataFilter | None) -> Cond | Logic | None:
    """LlamaIndex's MetadataFilters as documents.py's tree."""
    if filters is None:
        return None
    if isinstance(filters, MetadataFilter):
        op, key, value = filters.operator, filters.key, filters.value
        if op == FilterOperator.IS_EMPTY:
            return Cond(key, "empty", True)
        if op in (FilterOperator.ANY, FilterOperator.ALL):
            values = value if isinstance(value, list) else [value]
            joined = "or" if op == FilterOperator.ANY else "and"
            return Logic(joined, [Cond(key, "contains", v) for v in values])
        if op == FilterOperator.TEXT_MATCH_INSENSITIVE:
            escaped = str(value).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            return Cond(key, "like", f"%{escaped}%")
        if op not in _OPS:
            raise QueryError(f"filter on {key!r}: operator {op} is not supported")
        return Cond(key, _OPS[op], value)
    parts = [parse_filters(f) for f in filters.filters]
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.NOT:
        return Logic("not", [Logic("and", parts)])
    return Logic("or" if condition == FilterCondition.OR else "and", parts)


class HybridSQLEmbedding(BaseEmbedding):
    """hybridsql's local model as a LlamaIndex embedding: ``model`` names it (all-MiniLM-L6-v2
    by default, multilingual-e5-small, a converted model's id, a model file or a Hugging Face
    folder); the vectors ``hybridsql index`` writes, so the CLI's hybrid search finds what the
    store wrote."""

    _provider: Any = PrivateAttr()

    def __init__(self, provider: Any = None, model: Any = None, **kwargs: Any) -> None:
        from hybridsql.embedding.embedder import LocalProvider

        if provider is not None and model is not None:
            raise QueryError("give provider= or model=, not both")
        provider = provider or LocalProvider(model=model)
        super().__init__(model_name=provider.model_id, **kwargs)
        self._provider = provider

    def _get_query_embedding(self, query: str) -> list[float]:
        if getattr(self._provider, "roles", False):  # a query prefix of its own (e5's)
            return self._provider.embed([query], role="query")[0].tolist()
        return self._provider.embed([query])[0].tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._provider.embed([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._provider.embed(list(texts)).tolist() if texts else []


class HybridSQLVectorStore(BasePydanticVectorStore):
    """Nodes in a hybridsql index at ``db_path`` (made if missing), collection ``collection``;
    ``model_id`` names the embedding model the nodes' vectors come from: by default the model
    the index was made by, else the local model's (what the CLI's hybrid search uses). ``model``
    names hybridsql's local model instead (HybridSQLEmbedding(model=...) makes its vectors):
    it is recorded in the index as the CLI records it, and another one than the index's is a
    ModelMismatchError. ``index``: an open HybridIndex instead."""

    stores_text: bool = True
    flat_metadata: bool = False
    _collection: Collection = PrivateAttr()

    def __init__(
        self,
        db_path: str | None = None,
        collection: str = "llamaindex",
        model_id: str | None = None,
        *,
        index: Any = None,
        model: Any = None,
    ) -> None:
        from hybridsql.db.schema import recorded_model
        from hybridsql.embedding.choice import check
        from hybridsql.embedding.embedder import LocalProvider
        from hybridsql.indexing.index import HybridIndex

        super().__init__(stores_text=True)
        if model is not None and model_id is not None:
            raise QueryError("give model_id= (any model's) or model= (hybridsql's), not both")
        if index is None:
            if db_path is None:
                raise QueryError("give db_path (the index file) or index")
            index = HybridIndex(db_path, embedder="none")
        recorded = recorded_model(index.conn)
        record = None
        if model is not None:
            provider = LocalProvider(model=model)
            check(recorded, provider, False, index.db_path)
            model_id = provider.model_id

            def record(dims: int) -> None:
                index.record_model(dims, provider)

        elif model_id is None:
            model_id = recorded["model_id"] if recorded else LocalProvider.model_id
        self._collection = Collection(index, collection, model_id=model_id, record=record)

    @property
    def client(self) -> Any:
        """The HybridIndex the nodes are in."""
        return self._collection.index

    def close(self) -> None:
        self._collection.index.close()

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        nodes = list(nodes)
        if not nodes:
            return []
        missing = [n.node_id for n in nodes if n.embedding is None]
        vectors = None if missing else [n.embedding for n in nodes]
        if missing and len(missing) != len(nodes):
            raise QueryError(f"nodes {missing[:3]} have no embedding and the others have one")
        return self._collection.add(
            [n.get_content(metadata_mode=MetadataMode.NONE) for n in nodes],
            [node_to_metadata_dict(n, remove_text=True, flat_metadata=False) for n in nodes],
            [n.node_id for n in nodes],
            vectors,
        )

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Deletes every node of the document ``ref_doc_id``."""
        self._collection.delete(where=Cond("ref_doc_id", "=", ref_doc_id))

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        self._collection.delete(where=self._where(node_ids, filters))

    def clear(self) -> None:
        self._collection.clear()

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        where = self._where(node_ids, filters)
        ids = self._collection.ids(where)
        return [metadata_dict_to_node(meta, text) for _, text, meta in self._collection.get(ids)]

    @staticmethod
    def _where(node_ids, filters, doc_ids=None) -> Cond | Logic | None:
        """The condition of a call's node ids, document ids and filters; an empty list of ids
        restricts nothing (LlamaIndex's retriever passes [] for "any")."""
        parts: list[Cond | Logic | None] = []
        if node_ids:
            parts.append(Cond(ID, "in", list(node_ids)))
        if doc_ids:
            parts.append(Cond("ref_doc_id", "in", list(doc_ids)))
        if filters is not None:
            parts.append(parse_filters(filters))
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else Logic("and", parts)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        where = self._where(query.node_ids, query.filters, query.doc_ids)
        k = query.similarity_top_k
        mode = query.mode
        if mode == VectorStoreQueryMode.DEFAULT:
            found = self._collection.nearest(self._embedding(query), k, where)
        elif mode in (VectorStoreQueryMode.HYBRID, VectorStoreQueryMode.TEXT_SEARCH):
            options: dict = {}
            if mode == VectorStoreQueryMode.HYBRID and query.alpha is not None:
                options = {"vector_weight": query.alpha, "keyword_weight": 1.0 - query.alpha}
            if query.query_str is None:
                raise QueryError(f"query mode {mode.value} needs the query's text")
            found = self._collection.search(
                query.query_str,
                query.hybrid_top_k or k,
                "hybrid" if mode == VectorStoreQueryMode.HYBRID else "keyword",
                where,
                query.query_embedding if mode == VectorStoreQueryMode.HYBRID else None,
                **options,
            )
        elif mode == VectorStoreQueryMode.MMR:
            found = self._mmr(query, where, kwargs.get("mmr_prefetch_k"))
        else:
            raise QueryError(
                f"query mode {mode.value} is not supported: use default, hybrid, text_search or mmr"
            )
        return VectorStoreQueryResult(
            nodes=[metadata_dict_to_node(f.metadata, f.text) for f in found],
            similarities=[f.score for f in found],
            ids=[f.id for f in found],
        )

    @staticmethod
    def _embedding(query: VectorStoreQuery) -> list[float]:
        if query.query_embedding is None:
            raise QueryError(f"query mode {query.mode.value} needs the query's embedding")
        return query.query_embedding

    def _mmr(self, query: VectorStoreQuery, where, prefetch: int | None) -> list:
        embedding = self._embedding(query)
        k = query.similarity_top_k
        pool = self._collection.nearest(embedding, prefetch or max(4 * k, 20), where)
        stored = self._collection.vectors([f.id for f in pool])
        scores, picked = get_top_k_mmr_embeddings(
            embedding,
            [stored[f.id].tolist() for f in pool],
            similarity_top_k=k,
            embedding_ids=list(range(len(pool))),
            mmr_threshold=query.mmr_threshold,
        )
        chosen = [pool[i] for i in picked]
        for f, score in zip(chosen, scores, strict=True):
            f.score = score
        return chosen
