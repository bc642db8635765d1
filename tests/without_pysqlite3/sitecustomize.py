"""On PYTHONPATH, makes ``import pysqlite3`` fail as where it is not installed (ModuleNotFoundError),
so that sqlite-utils and Datasette run on Python's own sqlite3: the tests of a Python that cannot
load extensions (conftest.WITHOUT_PYSQLITE3)."""

import sys

sys.modules["pysqlite3"] = None
