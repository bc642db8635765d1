"""The one module that touches cffi: the C kernels of csrc/hybridsql.c, wrapped for Python.

The kernels live in the loadable library itself (``hybridsql.so``, ``.dylib`` or ``.dll``), which
exports them beside SQLite's entry point; cffi opens it in ABI mode, so one binary per platform
serves every Python version. Callers pass and get plain Python objects; ``ffi`` and ``lib`` never
leave this module. cffi is imported, and the declarations parsed, at the first kernel call, not
at import: the extension's own path (hybridsql.connect, a search) never calls one, and parsing
them cost a new process more than the rest of its first connect.
"""

import os
import sys
import threading

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

_opened: list = []  # [(ffi, lib)] once opened; lib None when the library is not built
_lock = threading.Lock()


def _open():
    """(ffi, lib): the library opened with cffi on first use; lib None where it is not built."""
    if not _opened:
        with _lock:
            if not _opened:
                from cffi import FFI

                ffi = FFI()
                ffi.cdef(CDEF)
                try:
                    lib = ffi.dlopen(PATH)
                except OSError:  # not built (a source checkout): callers use numpy or Python
                    lib = None
                _opened.append((ffi, lib))
    return _opened[0]


def available() -> bool:
    """Whether the library is built and opens: the kernels below can be called."""
    return _open()[1] is not None


def simd_path() -> str:
    """The SIMD path the kernels chose on this CPU: ``avx2+fma``, ``sse2``, ``neon`` or
    ``generic``."""
    ffi, lib = _open()
    return ffi.string(lib.hs_simd_path()).decode()


def first_nonfinite(blob: bytes) -> int:
    """Index of the first NaN or infinity in a float32 blob, -1 when all are finite."""
    ffi, lib = _open()
    return lib.hs_first_nonfinite(ffi.from_buffer("float[]", blob), len(blob) // 4)


def cosine(a: bytes, b: bytes) -> float:
    """Cosine of two float32 blobs of equal length, in double precision."""
    ffi, lib = _open()
    return lib.hs_cosine(ffi.from_buffer("float[]", a), ffi.from_buffer("float[]", b), len(a) // 4)
