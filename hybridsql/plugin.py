"""The sqlite-utils plugin: every hybridsql function, and embed(), in ``sqlite-utils query``."""

import sqlite_utils

from hybridsql.embed import default_embedder, register_embed
from hybridsql.extension import load


@sqlite_utils.hookimpl
def prepare_connection(conn):
    load(conn)
    register_embed(conn, default_embedder)  # the model loads on the first embed() call
