"""The one module that touches cffi: the C kernels of csrc/hybridsql.c, wrapped for Python.

The kernels live in the loadable library itself (``hybridsql.so``, ``.dylib`` or ``.dll``), which
exports them beside SQLite's entry point; cffi opens it in ABI mode, so one binary per platform
serves every Python version. Callers pass and get plain Python objects; ``ffi`` and ``lib`` never
leave this module.
"""

import os
import sys

from cffi import FFI

# The declarations of csrc/hybridsql.h (tests/test_extension.py checks that they agree).
CDEF = """
const char *hs_simd_path(void);
int64_t hs_first_nonfinite(const float *v, int64_t d);
double hs_cosine(const float *a, const float *b, int64_t d);
"""

# The library's file name on each platform: SQLite derives the entry point
# sqlite3_hybridsql_init from it, and the sqlite3 shell's `.load hybridsql` adds the suffix.
LIBRARY = {"win32": "hybridsql.dll", "darwin": "hybridsql.dylib"}.get(sys.platform, "hybridsql.so")
PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY)

ffi = FFI()
ffi.cdef(CDEF)
try:
    lib = ffi.dlopen(PATH)
except OSError:  # not built (a source checkout): the callers fall back to numpy or pure Python
    lib = None

AVAILABLE = lib is not None


def simd_path() -> str:
    """The SIMD path the kernels chose on this CPU: ``avx2+fma``, ``sse2``, ``neon`` or
    ``generic``."""
    return ffi.string(lib.hs_simd_path()).decode()


def first_nonfinite(blob: bytes) -> int:
    """Index of the first NaN or infinity in a float32 blob, -1 when all are finite."""
    return lib.hs_first_nonfinite(ffi.from_buffer("float[]", blob), len(blob) // 4)


def cosine(a: bytes, b: bytes) -> float:
    """Cosine of two float32 blobs of equal length, in double precision."""
    return lib.hs_cosine(ffi.from_buffer("float[]", a), ffi.from_buffer("float[]", b), len(a) // 4)
