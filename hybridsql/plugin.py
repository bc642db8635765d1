"""The sqlite-utils plugin: every hybridsql function, and embed(), in ``sqlite-utils query``."""

import warnings

import sqlite_utils

from hybridsql.embed import default_embedder, register_embed
from hybridsql.extension import PYTHON_ONLY, load


@sqlite_utils.hookimpl
def prepare_connection(conn):
    if load(conn) != "extension":
        warnings.warn(PYTHON_ONLY, stacklevel=2)
    register_embed(conn, default_embedder)  # the model loads on the first embed() call
