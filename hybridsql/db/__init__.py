"""The SQLite file and the SQL functions: every other part reaches the database through here.

- ``_native``: the only module that touches cffi: the library's kernels, tokenizer and model;
- ``extension``: the SQL functions loaded into a connection (the native extension, else Python),
  ``connect``, ``close``, ``transaction``, a file's errors in one line, the user's cache folder;
- ``functions``: the SQL functions in Python, with the C's semantics and error texts;
- ``vectors``: VectorReader, a ``vector_index`` table's storage read by numpy or pure Python;
- ``schema``: the tables, FTS5 indexes and triggers; an index checked and upgraded at open;
- ``stats``: an index file's bytes by table (``hybridsql stats``);
- ``replication``: replicate and restore with Litestream.

The bottom layer: nothing here imports the packages above it (.importlinter). This face imports
none of its modules, so that importing one costs only that one.
"""
