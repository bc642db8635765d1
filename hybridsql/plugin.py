"""The sqlite-utils plugin: every hybridsql function in ``sqlite-utils query``."""

import sqlite_utils

from hybridsql.extension import load


@sqlite_utils.hookimpl
def prepare_connection(conn):
    load(conn)
