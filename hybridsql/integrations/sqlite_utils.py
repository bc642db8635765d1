"""The sqlite-utils plugin: every hybridsql function, and embed(), in ``sqlite-utils query``."""

import sqlite_utils

from hybridsql.db.extension import load
from hybridsql.embedding.embedder import default_embedder, register_embed
from hybridsql.embedding.engine import local_by_default
from hybridsql.embedding.models import prepare_sql_embed


@sqlite_utils.hookimpl
def prepare_connection(conn):
    # Where it falls back to Python, load says so once. The extension's embed() serves the
    # local model; another provider's, or the fallback's, is registered in Python, and loads
    # on the first embed() call.
    if load(conn) == "extension" and local_by_default():
        prepare_sql_embed(conn)
    else:
        register_embed(conn, default_embedder)
