"""Python implementations of the SQL functions, for connections that cannot load the extension.

The semantics and error texts are those of csrc/functions/ (scalar.c, args.c); "Requirement N"
cites scalar.c's header.
Every vector becomes its float32 blob first; the math on blobs runs in the C kernels through cffi
when they are built, else in numpy (backend ``numpy``), or in pure Python (backend ``python``).
"""

import heapq
import math
import re
import struct
from array import array

from hybridsql import __version__ as VERSION
from hybridsql.db import _native
from hybridsql.errors import VectorError

MAX_DIMS = 65536
MAX_K = 10000
BACKENDS = ("auto", "extension", "numpy", "python")
SATURATION = 10.0
HALF_LIFE = 30.0
MAX_NUMBER = 511
ORDINALS = ("1st", "2nd", "3rd", "4th", "5th")

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WS = " \t\n\r"
_ISO = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[T ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(\.[0-9]+)?)?"
    r"(Z|[+-][0-9]{2}:?[0-9]{2})?)?"
)
_DATED = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})\.md")


class SQLFunctionError(VectorError):
    """A SQL function was called with bad arguments (the text says which and why)."""


def type_name(value) -> str:
    """SQLite's name for the storage class of a Python value."""
    if value is None:
        return "NULL"
    return {int: "integer", float: "real", str: "text"}.get(type(value), "blob")


# -- vector math on float32 blobs: three interchangeable backends ------------------------------


class PythonMath:
    """Pure Python, double precision."""

    name = "python"
    kernels = "python"

    @staticmethod
    def floats(blob):
        return array("f", blob)

    def first_nonfinite(self, blob) -> int:
        for i, x in enumerate(self.floats(blob)):
            if not math.isfinite(x):
                return i
        return -1

    def cosine(self, a, b) -> float:
        x, y = self.floats(a), self.floats(b)
        return _clamp_cosine(math.fsum(p * q for p, q in zip(x, y, strict=False)), _sq(x), _sq(y))


class NumpyMath(PythonMath):
    """numpy, double precision."""

    name = "numpy"
    kernels = "numpy"

    def __init__(self):
        import numpy

        self.np = numpy

    def floats(self, blob):
        return self.np.frombuffer(blob, dtype="<f4").astype(self.np.float64)

    def first_nonfinite(self, blob) -> int:
        bad = self.np.flatnonzero(~self.np.isfinite(self.np.frombuffer(blob, dtype="<f4")))
        return int(bad[0]) if len(bad) else -1

    def cosine(self, a, b) -> float:
        x, y = self.floats(a), self.floats(b)
        return _clamp_cosine(float(x @ y), float(x @ x), float(y @ y))


class CffiMath:
    """The C kernels of the extension, called through cffi: the numpy backend's math when they
    are built (the same bits as the extension, and faster than numpy on one pair of vectors)."""

    name = "numpy"
    kernels = "cffi"
    first_nonfinite = staticmethod(_native.first_nonfinite)
    cosine = staticmethod(_native.cosine)


def _sq(x) -> float:
    return math.fsum(v * v for v in x)


def _clamp_cosine(ab: float, aa: float, bb: float) -> float:
    """Requirement 4: a zero vector gives 0.0; rounding never leaves [-1, 1]."""
    if aa == 0.0 or bb == 0.0:
        return 0.0
    return max(-1.0, min(1.0, ab / math.sqrt(aa * bb)))


def make_math(backend: str = "numpy"):
    """The vector math of the Python backends: ``numpy`` (the C kernels through cffi when they
    are built, else numpy itself) or ``python``."""
    if backend == "numpy":
        return CffiMath() if _native.available() else NumpyMath()
    if backend == "python":
        return PythonMath()
    raise ValueError(f"unknown backend {backend!r}")


# -- argument parsing (Requirements 1, 3 and 8) ------------------------------------------------


def _parse_json_vector(s: str):
    """Mirror of hs_parse_json_vector: (status, float32 blob, bad index)."""
    n, i, values, bad = len(s), 0, [], -1
    while i < n and s[i] in _WS:
        i += 1
    if i >= n or s[i] != "[":
        return "malformed", None, -1
    i += 1
    while i < n and s[i] in _WS:
        i += 1
    if i < n and s[i] == "]":
        i += 1
    else:
        while True:
            m = _NUMBER.match(s, i)
            if not m or len(m.group()) > MAX_NUMBER:
                return "malformed", None, -1
            if len(values) >= MAX_DIMS:
                return "too long", None, -1
            try:
                value = struct.unpack("<f", struct.pack("<f", float(m.group())))[0]
            except OverflowError:  # beyond float32, as C's (float) cast makes infinity
                value = math.inf
            if not math.isfinite(value) and bad < 0:
                bad = len(values)
            values.append(value)
            i = m.end()
            while i < n and s[i] in _WS:
                i += 1
            if i < n and s[i] == ",":
                i += 1
                while i < n and s[i] in _WS:
                    i += 1
                continue
            if i < n and s[i] == "]":
                i += 1
                break
            return "malformed", None, -1
    while i < n and s[i] in _WS:
        i += 1
    if i != n:
        return "malformed", None, -1
    if not values:
        return "empty", None, -1
    if bad >= 0:
        return "nonfinite", None, bad
    return "ok", array("f", values).tobytes(), -1


def read_vector(value, fn: str, what: str, vmath):
    """A vector argument as its float32 blob, None for NULL; raises SQLFunctionError."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        blob = bytes(value)
        if len(blob) % 4:
            raise SQLFunctionError(
                f"{fn}(): {what} is a BLOB of {len(blob)} bytes, not a multiple of 4"
            )
        if not blob:
            raise SQLFunctionError(f"{fn}(): {what} is an empty vector")
        if len(blob) // 4 > MAX_DIMS:
            raise SQLFunctionError(
                f"{fn}(): {what} has {len(blob) // 4} dimensions, more than {MAX_DIMS}"
            )
        bad = vmath.first_nonfinite(blob)
        if bad >= 0:
            raise SQLFunctionError(f"{fn}(): {what} has a non-finite value at index {bad}")
        return blob
    if isinstance(value, str):
        status, blob, bad = _parse_json_vector(value)
        if status == "ok":
            return blob
        raise SQLFunctionError(
            f"{fn}(): {what} "
            + {
                "empty": "is an empty vector",
                "nonfinite": f"has a non-finite value at index {bad}",
                "too long": f"has more than {MAX_DIMS} dimensions",
                "malformed": "is not a JSON array of numbers",
            }[status]
        )
    raise SQLFunctionError(
        f"{fn}(): {what} must be a vector (float32 BLOB or JSON array text), got {type_name(value)}"
    )


def read_number(value, fn: str, pos: int, name: str) -> float:
    """A finite number argument; NULL, infinities and other types raise SQLFunctionError."""
    if type(value) not in (int, float):
        raise SQLFunctionError(
            f"{fn}(): {ORDINALS[pos]} argument {name} must be a number, got {type_name(value)}"
        )
    number = float(value)
    if not math.isfinite(number):
        raise SQLFunctionError(
            f"{fn}(): {ORDINALS[pos]} argument {name} must be a finite number, got {number:g}"
        )
    return number


def parse_time(text: str):
    """ISO-8601 text to unix seconds (Requirement 8), None when unreadable."""
    m = _ISO.fullmatch(text)
    if not m:
        return None
    y, mo, d, hh, mm, ss, frac, tz = m.groups()
    days = _days(int(y), int(mo), int(d))
    hh, mm, ss = int(hh or 0), int(mm or 0), int(ss or 0)
    if days is None or hh > 23 or mm > 59 or ss > 59:
        return None
    offset = 0
    if tz and tz != "Z":
        digits = tz[1:].replace(":", "")
        if len(digits) != 4 or int(digits[:2]) > 23 or int(digits[2:]) > 59:
            return None
        offset = (int(digits[:2]) * 3600 + int(digits[2:]) * 60) * (-1 if tz[0] == "-" else 1)
    return float(days * 86400 + hh * 3600 + mm * 60 + ss - offset) + _fraction(frac)


def _fraction(frac) -> float:
    """The C parser's digit-by-digit fraction, so both give the same double."""
    total, scale = 0.0, 0.1
    for c in (frac or ".")[1:]:
        total += int(c) * scale
        scale /= 10
    return total


def _days(y: int, m: int, d: int):
    """Days since 1970-01-01, None for a date that is not on the calendar."""
    if not 1 <= m <= 12:
        return None
    leap = (y % 4 == 0 and y % 100 != 0) or y % 400 == 0
    if not 1 <= d <= (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[m - 1]:
        return None
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def path_days(path: str):
    """Days since the epoch of a YYYY-MM-DD.md file name at any depth, else None."""
    name = re.split(r"[/\\]", path)[-1]
    m = _DATED.fullmatch(name)
    return _days(*map(int, m.groups())) if m else None


def format_float(x: float) -> str:
    """Requirement 9: the fewest digits (6 to 9) that read back as the same float32."""
    for p in range(6, 10):
        text = f"{x:.{p}g}"
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == x:
            break
    return text


# -- the SQL functions ------------------------------------------------------------------------


class Functions:
    """The SQL functions over one vector math backend, ready to register on a connection."""

    def __init__(self, vmath):
        self.math = vmath

    def cosine_similarity(self, a, b):
        a = read_vector(a, "cosine_similarity", "1st argument", self.math)
        b = read_vector(b, "cosine_similarity", "2nd argument", self.math)
        if a is None or b is None:
            return None
        if len(a) != len(b):
            raise SQLFunctionError(
                f"cosine_similarity(): 1st argument has {len(a) // 4} dimensions, "
                f"2nd argument has {len(b) // 4}"
            )
        return self.math.cosine(a, b)

    def bm25_score(self, rank, saturation=SATURATION):
        saturation = read_number(saturation, "bm25_score", 1, "saturation")
        if not saturation > 0:
            raise SQLFunctionError(
                f"bm25_score(): 2nd argument saturation must be > 0, got {saturation:g}"
            )
        if rank is None:
            return 0.0
        return _bm25(read_number(rank, "bm25_score", 0, "rank"), saturation)

    def hybrid_score(self, *args):
        names = ("vector_score", "bm25_rank", "vector_weight", "keyword_weight", "saturation")
        x = [0.0, 0.0, 0.7, 0.3, SATURATION]
        for i, value in enumerate(args):
            if i < 2 and value is None:
                continue
            x[i] = read_number(value, "hybrid_score", i, names[i])
        if not -1 <= x[0] <= 1:
            raise SQLFunctionError(
                f"hybrid_score(): 1st argument vector_score must be from -1 to 1, got {x[0]:g}"
            )
        for i in (2, 3):
            if x[i] < 0:
                raise SQLFunctionError(
                    f"hybrid_score(): {ORDINALS[i]} argument {names[i]} must be >= 0, got {x[i]:g}"
                )
        if not x[4] > 0:
            raise SQLFunctionError(
                f"hybrid_score(): 5th argument saturation must be > 0, got {x[4]:g}"
            )
        keyword = 0.0 if args[1] is None else _bm25(x[1], x[4])
        score = x[2] * x[0] + x[3] * keyword
        if not math.isfinite(score):
            raise SQLFunctionError(
                f"hybrid_score(): 3rd argument vector_weight {x[2]:g} and 4th argument "
                f"keyword_weight {x[3]:g} give a score beyond the range of a double"
            )
        return score

    def temporal_decay(self, path, now, half_life=HALF_LIFE):
        half_life = read_number(half_life, "temporal_decay", 2, "half_life_days")
        if not half_life > 0:
            raise SQLFunctionError(
                f"temporal_decay(): 3rd argument half_life_days must be > 0, got {half_life:g}"
            )
        if path is None or now is None:
            return None
        if not isinstance(path, str):
            raise SQLFunctionError(
                f"temporal_decay(): 1st argument path must be text, got {type_name(path)}"
            )
        if type(now) in (int, float):
            seconds = read_number(now, "temporal_decay", 1, "now")
        else:
            seconds = parse_time(now) if isinstance(now, str) else None
            if seconds is None:
                got = "unreadable text" if isinstance(now, str) else type_name(now)
                raise SQLFunctionError(
                    "temporal_decay(): 2nd argument now must be unix seconds or ISO-8601 text, "
                    f"got {got}"
                )
        days = path_days(path)
        if days is None:
            return 1.0
        return _decay((seconds - days * 86400.0) / 86400.0, half_life)

    def vector_blob(self, x):
        return read_vector(x, "vector_blob", "1st argument", self.math)

    def vector_json(self, x):
        blob = read_vector(x, "vector_json", "1st argument", self.math)
        if blob is None:
            return None
        return "[" + ",".join(format_float(v) for v in array("f", blob)) + "]"

    def hybridsql_version(self):
        return VERSION

    def hybridsql_simd(self):
        """The SIMD path of the C kernels where they answer, else the math's name."""
        return _native.simd_path() if self.math.kernels == "cffi" else self.math.kernels

    def hybridsql_debug(self, sqlite_version: str = "") -> str:
        kernels = f"; kernels {self.math.kernels}"
        if self.math.kernels == "cffi":
            kernels += f"; simd {_native.simd_path()}"
        return f"hybridsql {VERSION}; backend {self.math.name}{kernels}; sqlite {sqlite_version}"

    def topk(self):
        """A fresh cosine_topk() aggregate state (Requirement 5)."""
        return TopK(self.math)


def _bm25(rank: float, saturation: float) -> float:
    r = -rank if rank < 0 else 0.0
    total = saturation + r
    if math.isinf(total):  # both near the largest double
        return (r / 2) / (saturation / 2 + r / 2)
    return r / total


def _decay(age_days: float, half_life: float) -> float:
    if not age_days > 0:  # a tiny half life makes the rate infinite, and inf * 0 is NaN
        return 1.0
    return math.exp(-math.log(2.0) / half_life * age_days)


class TopK:
    """The cosine_topk() aggregate: a bounded heap of the k best (score, id) rows."""

    def __init__(self, vmath):
        self.math = vmath
        self.started = False
        self.query = None
        self.k = 0
        self.heap = []  # (score, -id): the root is the worst kept row

    def step(self, query, k, row_id, vector):
        if not self.started:
            self.started = True
            self.query = read_vector(query, "cosine_topk", "1st argument", self.math)
            if type(k) is not int:
                raise SQLFunctionError(
                    f"cosine_topk(): 2nd argument k must be an integer from 1 to {MAX_K}, "
                    f"got {type_name(k)}"
                )
            if not 1 <= k <= MAX_K:
                raise SQLFunctionError(
                    f"cosine_topk(): 2nd argument k must be an integer from 1 to {MAX_K}, got {k}"
                )
            self.k = k
        if self.query is None or vector is None:
            return
        if type(row_id) is not int:
            raise SQLFunctionError(
                f"cosine_topk(): 3rd argument id must be an integer, got {type_name(row_id)}"
            )
        blob = read_vector(vector, "cosine_topk", f"4th argument of row {row_id}", self.math)
        if len(blob) != len(self.query):
            raise SQLFunctionError(
                f"cosine_topk(): 1st argument has {len(self.query) // 4} dimensions, "
                f"row {row_id} has {len(blob) // 4}"
            )
        item = (self.math.cosine(self.query, blob), -row_id)
        if len(self.heap) < self.k:
            heapq.heappush(self.heap, item)
        elif item > self.heap[0]:
            heapq.heapreplace(self.heap, item)

    def final(self):
        if self.started and self.query is None:
            return None
        hits = sorted(self.heap, key=lambda h: (-h[0], -h[1]))
        return "[" + ",".join(f"[{-i},{s:.17g}]" for s, i in hits) + "]"
