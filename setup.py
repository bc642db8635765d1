"""Builds the one C source twice: a plain SQLite extension and the cffi kernels module.

- ``hybridsql/hybridsql.so``: a plain shared library with no Python symbols, so the stock
  ``sqlite3`` shell can ``.load`` it (SQLite derives the entry point ``sqlite3_hybridsql_init``
  from the file name).
- ``hybridsql._kernels``: a cffi API-mode module compiled from the same source without the SQL
  layer (``HYBRIDSQL_KERNELS_ONLY``); cffi checks the header's declarations at compile time.

Set ``HYBRIDSQL_SANITIZE=1`` to build both with AddressSanitizer and UndefinedBehaviorSanitizer.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
# Hidden visibility: the loadable library exports its entry point alone, not its hs_* kernels.
COMPILE_ARGS = ["-O3", "-fno-math-errno", "-fvisibility=hidden"] + (
    SANITIZE if os.environ.get("HYBRIDSQL_SANITIZE") else []
)
LINK_ARGS = SANITIZE if os.environ.get("HYBRIDSQL_SANITIZE") else []


class BuildExt(build_ext):
    """Gives the loadable extension the plain name ``hybridsql.so``."""

    def get_ext_filename(self, fullname):
        # distutils asks with the full name and with its last part alone; answer both.
        if fullname == "hybridsql.hybridsql":
            return os.path.join("hybridsql", "hybridsql.so")
        if fullname == "hybridsql":
            return "hybridsql.so"
        return super().get_ext_filename(fullname)


loadable = Extension(
    "hybridsql.hybridsql",
    sources=["csrc/hybridsql.c"],
    include_dirs=["csrc"],
    extra_compile_args=COMPILE_ARGS,
    extra_link_args=LINK_ARGS,
    libraries=["m"],
)

setup(
    ext_modules=[loadable],
    cffi_modules=["csrc/build_kernels.py:ffibuilder"],
    cmdclass={"build_ext": BuildExt},
)
