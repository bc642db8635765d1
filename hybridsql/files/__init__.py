"""What an index reads: the files of a folder and the chunks each is cut into.

- ``discovery``: which files of a folder (``--glob``, ``.gitignore``), what was left out and
  why, a path opened safely below the folder, and the Progress an index run reports to;
- ``chunking``: heading-aware markdown chunks, sized by a token estimate or a tokenizer, and
  the heading a line is under (a snippet's).

A bottom layer beside ``db``: it knows nothing of SQLite (.importlinter). This face imports none
of its modules.
"""
