"""Search options: SearchOptions, the value checks every search runs, and the limits.

What a search can be told, declared once (see hybridsql.options), and checked before anything
reaches SQL: the choices, the counts (at most MAX_RESULTS, the extension's largest k) and the
numbers, the same for every way in.
"""

import math
import os
import re
import sys
import warnings
from dataclasses import InitVar, dataclass, replace
from datetime import datetime, timezone
from types import FrameType

from hybridsql.db.functions import BACKENDS, MAX_K
from hybridsql.errors import QueryError
from hybridsql.options import option

MODES = ("hybrid", "keyword", "semantic")
FUSIONS = ("linear", "rrf")
KEYWORD_NORMS = ("max", "saturation")
# The most results, candidates or terms a search takes: the extension's maximum k, so every
# count is checked before it reaches SQL, the same for every way in.
MAX_RESULTS = MAX_K
# The longest query, in characters: a megabyte of text. A search reads no more of a query than
# it needs for its MAX_TERMS distinct terms and the model's tokens, but what reads the whole of
# it (cleaning, splitting) still grows with its length, and the MCP server answers one call at
# a time.
MAX_QUERY_CHARS = 1_000_000
# limit's old name, taken for one release with this warning.
MAX_RESULTS_DEPRECATED = "max_results is deprecated, use limit; it goes in 0.2.0"
LIMIT = 10


@dataclass
class SearchOptions:
    """Everything a search can be told: HybridIndex.search's keyword arguments and, derived from
    these fields (see hybridsql.options), the flags of ``hybridsql search``."""

    mode: str = option(
        "hybrid", "keyword (FTS5 bm25), semantic (vectors) or both fused", choices=MODES
    )
    vector_weight: float = option(0.7, "weight of the vector score in the linear fusion")
    keyword_weight: float = option(0.3, "weight of the keyword score in the linear fusion")
    min_score: float = option(0.1, "drop results whose relevance (before decay) is lower")
    limit: int = option(LIMIT, "how many results", short="-n")
    half_life_days: float = option(
        30.0,
        "days for a dated note's (memory/YYYY-MM-DD.md) score to halve",
        aliases=["--half-life"],
    )
    candidate_pool: int = option(100, "candidates taken from each side", aliases=["--pool"])
    fusion: str = option("linear", "linear (weighted scores) or rrf (ranks)", choices=FUSIONS)
    keyword_norm: str = option(
        "max",
        "bm25 to [0, 1]: max (relative to the best) or saturation (absolute)",
        choices=KEYWORD_NORMS,
    )
    keyword_terms: int = option(
        0, "keep only the N rarest query words for bm25 (faster on long queries); 0 keeps all"
    )
    saturation: float = option(10.0, "the bm25 at which keyword_norm=saturation gives 0.5")
    vector_floor: float | None = option(
        None,
        "cosine below which a vector match counts as noise; default the model's (0.25 for"
        " all-MiniLM-L6-v2, 0.8 for multilingual-e5-small)",
    )
    vector_ceiling: float | None = option(
        None,
        "cosine at which a vector match scores 1 (more above it); default the model's (1.0 for"
        " all-MiniLM-L6-v2, 0.9 for multilingual-e5-small)",
    )
    prefix: bool = option(False, "match word prefixes (auth finds authentication)")
    mmr: bool = option(False, "re-rank for diversity (maximal marginal relevance)")
    mmr_lambda: float = option(0.7, "MMR's balance: 1 is relevance alone, 0 diversity alone")
    backend: str = option(
        "auto", "where vectors are ranked: the extension, numpy or pure Python", choices=BACKENDS
    )
    now: float | str | None = option(
        None, "the time to decay against: unix seconds or an ISO date (2026-11-22); default now"
    )
    decay: bool = option(
        True, "dated notes lose score with age; --no-decay ranks them by relevance alone"
    )
    group_by_file: bool = option(
        False, "one result per file: its best chunk, with the lines of its other matches"
    )
    per_file: int = option(
        2,
        "most results from one file, each with its neighbouring matching chunks merged in, the"
        " lines of the rest on the file's first; 0: every matching chunk a result of its own",
    )
    # Deprecated: limit's old name (not a field: no flag, no MCP parameter, not in asdict()).
    max_results: InitVar[int | None] = None

    def __post_init__(self, max_results: int | None) -> None:
        if max_results is None:
            return
        if self.limit != LIMIT:
            raise QueryError("max_results is the old name of limit: give limit alone")
        warnings.warn(MAX_RESULTS_DEPRECATED, DeprecationWarning, stacklevel=_caller_level())
        self.limit = max_results

    def check(self) -> None:
        """Raises QueryError for a value no search can use."""
        choices = {
            "mode": MODES,
            "fusion": FUSIONS,
            "keyword_norm": KEYWORD_NORMS,
            "backend": BACKENDS,
        }
        for name, allowed in choices.items():
            value = getattr(self, name)
            if value not in allowed:
                raise QueryError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
        for name in COUNTS:
            value, low = getattr(self, name), COUNTS[name]
            if not whole(value) or not low <= value <= MAX_RESULTS:
                rule = f"an integer from {low} to {MAX_RESULTS}"
                raise QueryError(f"{name} must be {rule}, not {value!r}")
        for name in NUMBERS:
            value = getattr(self, name)
            if value is None and name in OPTIONAL:
                continue
            if name == "now":
                value = unix_time(value)
            if not finite(value):
                raise QueryError(f"{name} must be a finite number, not {value!r}")
        ranges = [
            ("vector_weight", self.vector_weight >= 0, ">= 0"),
            ("keyword_weight", self.keyword_weight >= 0, ">= 0"),
            ("saturation", self.saturation > 0, "> 0"),
            ("half_life_days", self.half_life_days > 0, "> 0"),
            ("vector_floor", self.vector_floor is None or 0 <= self.vector_floor < 1, "in [0, 1)"),
            (
                "vector_ceiling",
                self.vector_ceiling is None or 0 < self.vector_ceiling <= 1,
                "in (0, 1]",
            ),
            ("mmr_lambda", 0 <= self.mmr_lambda <= 1, "in [0, 1]"),
        ]
        for name, ok, rule in ranges:
            if not ok:
                raise QueryError(f"{name} must be {rule}, not {getattr(self, name)!r}")
        floor, ceiling = self.vector_floor, self.vector_ceiling
        if floor is not None and ceiling is not None and not floor < ceiling:
            raise QueryError(
                f"vector_floor must be below vector_ceiling, not {floor!r} and {ceiling!r}"
            )
        # No relevance passes a higher min_score: the weights' sum (of scores of at most 1), or
        # 1 for rrf and for memories (their relevance is clamped to 1).
        most = 1.0 if self.fusion == "rrf" else max(1.0, self.vector_weight + self.keyword_weight)
        if not 0 <= self.min_score <= most:
            raise QueryError(
                f"min_score must be from 0 to {most:g}, the highest relevance, not "
                f"{self.min_score!r}"
            )


def unix_time(value):
    """``now`` as unix seconds: a number as it is, or text: a number, or an ISO-8601 date or
    time (``2026-11-22``, ``2026-11-22T09:30:00Z``), UTC when it has no offset, as
    temporal_decay() reads it."""
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        pass
    try:
        # Python 3.10's fromisoformat does not take the Z suffix.
        moment = datetime.fromisoformat(re.sub(r"[zZ]$", "+00:00", value.strip()))
    except ValueError:
        raise QueryError(
            f"now must be unix seconds or an ISO-8601 date or time like 2026-11-22, not {value!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def whole(value) -> bool:
    """Whether ``value`` is an integer (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def finite(value) -> bool:
    """Whether ``value`` is a number SQLite takes as it is: a float neither NaN nor infinite,
    or an integer of 64 bits (a bool is neither)."""
    if whole(value):
        return -(2**63) <= value < 2**63
    return isinstance(value, float) and math.isfinite(value)


# The integer options and their least values; the most is MAX_RESULTS. keyword_terms 0 keeps
# every term.
COUNTS = {"limit": 1, "candidate_pool": 1, "keyword_terms": 0, "per_file": 0}
NUMBERS = (
    "vector_weight",
    "keyword_weight",
    "min_score",
    "half_life_days",
    "saturation",
    "vector_floor",
    "vector_ceiling",
    "mmr_lambda",
    "now",
)
# The numbers whose None means a default read elsewhere: the model's band, the time now.
OPTIONAL = ("vector_floor", "vector_ceiling", "now")


def with_band(opts: SearchOptions, model_id: str | None) -> SearchOptions:
    """``opts`` with its vector floor and ceiling given: where a search leaves them None, those
    of the model that made the index's vectors (models.cosine_band); a floor given alone keeps
    the model's ceiling where it is above the floor, else 1; a ceiling alone the model's floor
    where it is below it, else 0."""
    floor, ceiling = opts.vector_floor, opts.vector_ceiling
    if floor is not None and ceiling is not None:
        return opts
    from hybridsql.embedding.models import cosine_band  # no import of the models at start

    model_floor, model_ceiling = cosine_band(model_id)
    if floor is None and ceiling is None:
        floor, ceiling = model_floor, model_ceiling
    elif ceiling is None:
        ceiling = model_ceiling if model_ceiling > floor else 1.0
    else:
        floor = model_floor if model_floor < ceiling else 0.0
    return replace(opts, vector_floor=floor, vector_ceiling=ceiling)


def by_file(opts: SearchOptions, kind: str) -> bool:
    """Whether a search's chunks are made into at most per_file results a file: documents
    only (a memory has no file), and not with group_by_file (one a file, in the statement)."""
    return bool(opts.per_file) and not opts.group_by_file and kind == "document"


def params_limit(opts: SearchOptions, kind: str = "document") -> int:
    """MMR picks from the whole pool, and per_file from every candidate (a file's chunks
    past its results are merged into them or listed on them): up to a pool from each side.
    Otherwise the statement stops at the limit."""
    pool = max(opts.candidate_pool, opts.limit)
    if by_file(opts, kind):
        return 2 * pool
    return pool if opts.mmr else opts.limit


def _caller_level() -> int:
    """The stacklevel, for warnings.warn in the function that calls this, of the first caller
    outside hybridsql (and the __init__ dataclasses generate): the line a warning is about."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

    def ours(code) -> bool:
        generated = code.co_name == "__init__" and code.co_filename.startswith("<")
        return generated or code.co_filename.startswith(package)

    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and ours(frame.f_code):
        frame, level = frame.f_back, level + 1
    return level
