"""hybridsql inside other tools, each module for one, each imported only by that tool:

- ``langchain``: HybridSQLVectorStore, HybridSQLRetriever, HybridSQLEmbeddings;
- ``llamaindex``: HybridSQLVectorStore (every query mode), HybridSQLEmbedding;
- ``documents``: Collection, documents with ids and metadata filters in an index, which both
  framework stores are made of;
- ``datasette``: the Datasette plugin (the SQL functions, ``embed()``, a search page);
- ``sqlite_utils``: the sqlite-utils plugin (the SQL functions and ``embed()`` in its queries).

None imports another but ``documents`` (.importlinter). This face imports none of its modules:
``import hybridsql`` never loads LangChain or LlamaIndex.
"""
