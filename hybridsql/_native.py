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


def topk(query, matrix, ids, k: int):
    """The k rows of ``matrix`` (n, d float32, C order) most similar to ``query``.

    ``ids`` is an int64 array of n ids. Returns (ids, scores) as lists, best first, ties by id.
    """
    n, d = matrix.shape
    k = min(k, n)
    out_ids = ffi.new("int64_t[]", max(k, 1))
    out_scores = ffi.new("double[]", max(k, 1))
    got = lib.hs_topk(
        ffi.from_buffer("float[]", query),
        ffi.from_buffer("float[]", matrix),
        ffi.from_buffer("int64_t[]", ids),
        n, d, k, out_ids, out_scores,
    )
    if got < 0:
        raise MemoryError("hs_topk could not allocate its heap")
    return list(out_ids[0:got]), list(out_scores[0:got])
