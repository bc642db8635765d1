"""The sqlite-utils plugin: every hybridsql function, and embed(), in ``sqlite-utils query``."""

import sqlite_utils

from hybridsql.embed import default_embedder, register_embed
from hybridsql.extension import load


@sqlite_utils.hookimpl
def prepare_connection(conn):
    load(conn)  # where it falls back to Python, it says so once
    register_embed(conn, default_embedder)  # the model loads on the first embed() call
