"""The index users hold, and keeping it in step with its folder.

- ``index``: HybridIndex (opens an index file, indexes folders incrementally, searches it),
  IndexReport, and the index run's pipeline: files read and chunked ahead, embedded in
  batches, each written in one transaction;
- ``watch``: watch_folder, the index run again on each batch of file events
  (``hybridsql index --watch``, the MCP servers' memory folder).

Above ``search`` (HybridIndex.search runs it), below ``memory`` (.importlinter). This face
imports none of its modules.
"""
