"""LlamaIndex: a VectorStoreIndex built on hybridsql's store from documents, queried in every
mode with filters, a document deleted, and the index reopened from the file."""

import pytest

pytest.importorskip("llama_index.core", reason="the llamaindex extra is not installed")

from llama_index.core import Document, StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.schema import NodeRelationship  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQueryMode,
)

from hybridsql.errors import QueryError  # noqa: E402
from hybridsql.integrations.llamaindex import HybridSQLEmbedding, HybridSQLVectorStore  # noqa: E402

DOCS = [
    (
        "style",
        "Python code is indented with four spaces, never tabs.",
        {"topic": "style", "year": 2024, "tags": ["python", "format"]},
    ),
    (
        "deploy",
        "Deploys freeze on Fridays after 3pm.",
        {"topic": "ops", "year": 2025, "tags": ["deploy"]},
    ),
    (
        "backup",
        "The database is backed up every night with Litestream.",
        {"topic": "ops", "year": 2023, "tags": ["db", "backup"]},
    ),
    (
        "tests",
        "Use pytest for every test, with fixtures in conftest.py.",
        {"topic": "style", "year": 2026, "tags": ["python", "tests"]},
    ),
    (
        "cache",
        "Error E1234 means the cache is cold; warm it first.",
        {"topic": "ops", "year": 2026, "tags": []},
    ),
]


@pytest.fixture(scope="module")
def embed_model():
    return HybridSQLEmbedding()


def build(path, embed_model):
    store = HybridSQLVectorStore(str(path))
    context = StorageContext.from_defaults(vector_store=store)
    documents = [Document(text=t, metadata=m, id_=i) for i, t, m in DOCS]
    index = VectorStoreIndex.from_documents(
        documents, storage_context=context, embed_model=embed_model
    )
    return store, index


def ref_ids(nodes):
    return [n.node.ref_doc_id for n in nodes]


@pytest.mark.parametrize("mode", ["default", "hybrid", "text_search", "mmr"])
def test_every_query_mode_answers_from_the_index(tmp_path, embed_model, mode):
    store, index = build(tmp_path / "li.db", embed_model)
    query = {"text_search": "Litestream backed up", "hybrid": "E1234"}.get(
        mode, "how do I indent python?"
    )
    want = {"text_search": "backup", "hybrid": "cache"}.get(mode, "style")
    retriever = index.as_retriever(
        similarity_top_k=2, vector_store_query_mode=VectorStoreQueryMode(mode)
    )
    got = retriever.retrieve(query)
    assert got and got[0].node.ref_doc_id == want
    assert len(got) <= 2
    store.close()


FILTERS = [
    (
        MetadataFilters(filters=[MetadataFilter(key="topic", value="ops")]),
        {"deploy", "backup", "cache"},
    ),
    (
        MetadataFilters(
            filters=[MetadataFilter(key="year", value=2025, operator=FilterOperator.GTE)]
        ),
        {"deploy", "tests", "cache"},
    ),
    (
        MetadataFilters(
            filters=[MetadataFilter(key="year", value=[2023, 2024], operator=FilterOperator.IN)]
        ),
        {"style", "backup"},
    ),
    (
        MetadataFilters(
            filters=[MetadataFilter(key="year", value=[2023, 2024], operator=FilterOperator.NIN)]
        ),
        {"deploy", "tests", "cache"},
    ),
    (
        MetadataFilters(
            filters=[MetadataFilter(key="topic", value="ops", operator=FilterOperator.NE)]
        ),
        {"style", "tests"},
    ),
    (
        MetadataFilters(
            filters=[MetadataFilter(key="tags", value="python", operator=FilterOperator.CONTAINS)]
        ),
        {"style", "tests"},
    ),
    (
        MetadataFilters(
            filters=[
                MetadataFilter(key="tags", value=["db", "deploy"], operator=FilterOperator.ANY)
            ]
        ),
        {"deploy", "backup"},
    ),
    (
        MetadataFilters(
            filters=[
                MetadataFilter(key="tags", value=["python", "tests"], operator=FilterOperator.ALL)
            ]
        ),
        {"tests"},
    ),
    (
        MetadataFilters(
            filters=[MetadataFilter(key="tags", value=None, operator=FilterOperator.IS_EMPTY)]
        ),
        {"cache"},
    ),
    (
        MetadataFilters(
            filters=[
                MetadataFilter(
                    key="topic", value="OP", operator=FilterOperator.TEXT_MATCH_INSENSITIVE
                )
            ]
        ),
        {"deploy", "backup", "cache"},
    ),
    (
        MetadataFilters(
            filters=[MetadataFilter(key="topic", value="OP", operator=FilterOperator.TEXT_MATCH)]
        ),
        set(),
    ),
    (
        MetadataFilters(
            filters=[
                MetadataFilter(key="topic", value="style"),
                MetadataFilters(
                    filters=[
                        MetadataFilter(key="topic", value="ops"),
                        MetadataFilter(key="year", value=2024, operator=FilterOperator.LT),
                    ],
                    condition=FilterCondition.AND,
                ),
            ],
            condition=FilterCondition.OR,
        ),
        {"style", "tests", "backup"},
    ),
    (
        MetadataFilters(
            filters=[MetadataFilter(key="topic", value="ops")], condition=FilterCondition.NOT
        ),
        {"style", "tests"},
    ),
]


@pytest.mark.parametrize("filters, want", FILTERS)
@pytest.mark.parametrize("mode", ["default", "hybrid", "mmr"])
def test_filters_apply_before_the_top_k(tmp_path_factory, embed_model, filters, want, mode):
    store, index = build(tmp_path_factory.mktemp("f") / "li.db", embed_model)
    one = index.as_retriever(
        similarity_top_k=1, filters=filters, vector_store_query_mode=VectorStoreQueryMode(mode)
    )
    got = one.retrieve("how do I indent python?")
    if want:
        assert len(got) == 1 and got[0].node.ref_doc_id in want
    else:
        assert got == []
    if mode != "hybrid":  # the k nearest, whatever their cosine
        every = index.as_retriever(
            similarity_top_k=5, filters=filters, vector_store_query_mode=VectorStoreQueryMode(mode)
        )
        assert set(ref_ids(every.retrieve("how do I indent python?"))) == want
    store.close()


def test_metadata_and_relationships_come_back_intact(tmp_path, embed_model):
    store, index = build(tmp_path / "li.db", embed_model)
    node = index.as_retriever(similarity_top_k=1).retrieve("Litestream backups")[0].node
    assert node.metadata == DOCS[2][2]
    assert node.relationships[NodeRelationship.SOURCE].node_id == "backup"
    assert node.get_content() == DOCS[2][1]
    assert [n.node_id for n in store.get_nodes([node.node_id])] == [node.node_id]
    store.close()


def test_delete_a_document_and_reopen_the_file(tmp_path, embed_model):
    path = tmp_path / "li.db"
    store, index = build(path, embed_model)
    index.delete_ref_doc("backup")
    store.close()
    reopened = HybridSQLVectorStore(str(path))
    again = VectorStoreIndex.from_vector_store(reopened, embed_model=embed_model)
    found = ref_ids(again.as_retriever(similarity_top_k=5).retrieve("Litestream backups"))
    assert sorted(found) == ["cache", "deploy", "style", "tests"]
    reopened.close()


def test_unsupported_modes_say_so_in_one_line(tmp_path, embed_model):
    store, index = build(tmp_path / "li.db", embed_model)
    retriever = index.as_retriever(vector_store_query_mode=VectorStoreQueryMode.SVM)
    with pytest.raises(QueryError, match="query mode svm is not supported"):
        retriever.retrieve("x")
    store.close()
