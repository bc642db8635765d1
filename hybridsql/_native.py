"""The one module that touches cffi: the C kernels of csrc/hybridsql.c, wrapped for Python.

Callers pass and get plain Python objects; ``ffi`` and ``lib`` never leave this module.
"""

try:
    from hybridsql._kernels import ffi, lib
except ImportError:  # not built: the callers fall back to numpy or pure Python
    ffi = lib = None

AVAILABLE = lib is not None


def simd_path() -> str:
    """The SIMD path the kernels chose on this CPU, e.g. ``avx2+fma``."""
    return ffi.string(lib.hs_simd_path()).decode()


def first_nonfinite(blob: bytes) -> int:
    """Index of the first NaN or infinity in a float32 blob, -1 when all are finite."""
    return lib.hs_first_nonfinite(ffi.from_buffer("float[]", blob), len(blob) // 4)


def cosine(a: bytes, b: bytes) -> float:
    """Cosine of two float32 blobs of equal length, in double precision."""
    return lib.hs_cosine(ffi.from_buffer("float[]", a), ffi.from_buffer("float[]", b), len(a) // 4)
