"""The vector top-k of the numpy and pure-Python backends, read from vector_index's own storage.

A ``vector_index`` table (csrc/hybridsql.c, Requirement 10) keeps its rows in shadow tables of the
same file: ``T_blocks`` (one row per block of up to 256 rows of one partition, with a nonce that
changes with every write: from storage format 3 the block's checksum, which this reader does not
check, as the extension does), ``T_codes`` (each block's records: the row ids come from there),
``T_vectors`` (the float32 vectors, in groups) and ``T_rowids``. :class:`VectorReader` reads them
directly, so it needs no native code and works on any connection, apsw's or Python's ``sqlite3``.
It keeps each block it has read with the nonce it was read at and reads a block again only when
its nonce has changed: a write costs one block, never the whole matrix.

The answers are those of the extension: the same rows, with scores equal to about 1e-15 (numpy
sums in another order). numpy scores every row in float32 and rescores in float64 every row that
the float32 error bound cannot rule out; pure Python scores every row in float64.
"""

import heapq
import math
import re
from array import array

import numpy as np

from hybridsql.errors import QueryError

BLOCK_GROUPS = 256  # T_vectors ids: block * 256 + group
REC_HEAD = 16
SAFE_SQUARED_NORMS = (1e-20, 1e20)  # where the float32 bound holds: HS_SAFE_LO/HI in the C code


def record_stride(dims: int) -> int:
    return REC_HEAD + ((dims + 7) & ~7)


_COLUMN = re.compile(r'\s*("(?:[^"]|"")+"|`[^`]+`|\[[^\]]+\]|[\w\x80-\uffff]+)\s*(.*)', re.S)


def quoted(*names: str) -> str:
    """A schema-qualified SQL identifier: each name in double quotes, doubled inside."""
    return ".".join('"' + n.replace('"', '""') + '"' for n in names)


def table_columns(conn, table: str, schema: str = "main") -> tuple:
    """(partition columns, metadata columns) of a vector_index table, in declared order."""
    master = quoted(schema, "sqlite_schema")
    row = conn.execute(
        f"select sql from {master} where type = 'table' and name = ?", (table,)
    ).fetchone()
    if row is None or not re.search(r"using\s+vector_index\s*\(", row[0], re.I):
        raise QueryError(f"{table} is not a vector_index table")
    body = row[0][row[0].index("(") + 1 : row[0].rindex(")")]
    partitions, metadata = [], []
    for arg in body.split(","):
        m = _COLUMN.match(arg)
        name, words = m.group(1), " ".join(m.group(2).lower().split())
        if name[0] in '"`[':
            name = name[1:-1].replace('""', '"')
        if words.startswith("float[") or words == "integer primary key":
            continue
        (partitions if words.endswith(" partition key") else metadata).append(name)
    return partitions, metadata


class Block:
    """One block as read at ``nonce``: its row ids and vectors (float32 and their inverse norms
    for numpy; array('f') rows for pure Python)."""

    def __init__(self, nonce, ids, rows, inv_norms=None):
        self.nonce = nonce
        self.ids = ids
        self.rows = rows
        self.inv_norms = inv_norms


class VectorReader:
    """Top-k over a vector_index table without the extension; ``math`` is "numpy" or "python"."""

    def __init__(self, conn, table: str = "vectors", schema: str = "main", math_: str = "numpy"):
        if math_ not in ("numpy", "python"):
            raise ValueError(f"math must be numpy or python, not {math_!r}")
        self.conn = conn
        self.table = table
        self.schema = schema
        self.math = math_
        self.partitions, _ = table_columns(conn, table, schema)
        self.blocks = {}  # block id -> Block

    def _name(self, suffix: str) -> str:
        return quoted(self.schema, f"{self.table}_{suffix}")

    def vector_sql(self, rowid_sql: str, dims: int, where: dict) -> str:
        """SQL for the float32 vector of row ``rowid_sql`` (NULL unless in the partition
        ``where``), read from the shadow tables: for a connection without the extension."""
        conds = "".join(
            f" and b.p{self.partitions.index(name)} = :{param}" for name, param in where.items()
        )
        # A block's groups hold the same number of rows, which its layout chose (format 1 or 2,
        # from the page size: see vector_index in the C code); its first group's length says it.
        group = (
            f"(select length(f.data) / {4 * dims} from {self._name('vectors')} f"
            f" where f.id = r.block * {BLOCK_GROUPS})"
        )
        return (
            f"(select substr(g.data, (r.slot % {group}) * {4 * dims} + 1, {4 * dims})"
            f" from {self._name('rowids')} r join {self._name('blocks')} b on b.id = r.block"
            f" join {self._name('vectors')} g"
            f" on g.id = r.block * {BLOCK_GROUPS} + r.slot / {group}"
            f" where r.id = {rowid_sql} and b.dims = {dims}{conds})"
        )

    def _read(self, block_id, nonce, count, dims) -> Block:
        stride = record_stride(dims)
        (codes,) = self.conn.execute(
            f"select data from {self._name('codes')} where id = ?", (block_id,)
        ).fetchone()
        base = block_id * BLOCK_GROUPS
        groups = self.conn.execute(
            f"select data from {self._name('vectors')} where id between ? and ? order by id",
            (base, base + BLOCK_GROUPS - 1),
        ).fetchall()
        data = b"".join(g[0] for g in groups)[: 4 * dims * count]
        if self.math == "numpy":
            recs = np.frombuffer(codes, dtype=np.uint8, count=count * stride).reshape(count, stride)
            ids = recs[:, :8].copy().view("<i8").ravel()
            rows = np.frombuffer(data, dtype="<f4").reshape(count, dims)
            return Block(nonce, ids, rows, inverse_norms(rows))
        ids = [
            int.from_bytes(codes[i * stride : i * stride + 8], "little", signed=True)
            for i in range(count)
        ]
        rows = [array("f", data[i * 4 * dims : (i + 1) * 4 * dims]) for i in range(count)]
        return Block(nonce, ids, rows)

    def _selected(self, where: dict):
        """The blocks of the partition ``where`` (column name -> value), read or from memory."""
        conds, params = [], []
        for name, value in where.items():
            if name not in self.partitions:
                raise QueryError(f"{self.table} has no partition column {name}")
            conds.append(f"p{self.partitions.index(name)} is ?")
            params.append(value)
        sql = f"select id, dims, count, nonce from {self._name('blocks')}"
        if conds:
            sql += " where " + " and ".join(conds)
        out = []
        for block_id, dims, count, nonce in self.conn.execute(
            sql + " order by id", params
        ).fetchall():
            block = self.blocks.get(block_id)
            if block is None or block.nonce != nonce or len(block.ids) != count:
                block = self.blocks[block_id] = self._read(block_id, nonce, count, dims)
            out.append((dims, block))
        return out

    def topk(self, query: bytes, k: int, where: dict | None = None, ids=None) -> list:
        """The k rows most like ``query`` (a float32 blob) as [[id, score], ...], best first and
        ties by id, among the rows of partition ``where`` whose id is in ``ids`` (all when None)."""
        q = np.frombuffer(query, dtype="<f4")
        chosen = self._selected(where or {})
        for dims, _ in chosen:
            if dims != len(q):
                raise QueryError(
                    f"{self.table}: the query vector has {len(q)} dimensions, the vectors it is"
                    f" compared with have {dims}"
                )
        keep = None if ids is None else set(ids)
        if self.math == "numpy":
            return _numpy_topk([b for _, b in chosen], q, k, keep)
        return _python_topk([b for _, b in chosen], array("f", query), k, keep)


def inverse_norms(matrix, block: int = 65536):
    """1 / |row| for each row of a float32 matrix, 0 for an all-zero row. The norms are summed
    in float64 (a block of rows at a time), where float32 squares of tiny values underflow."""
    norms = np.empty(len(matrix), dtype=np.float64)
    for start in range(0, len(matrix), block):
        part = matrix[start : start + block].astype(np.float64)
        norms[start : start + block] = np.sqrt(np.einsum("ij,ij->i", part, part))
    with np.errstate(over="ignore"):
        return np.divide(1, norms, out=np.zeros_like(norms), where=norms > 0).astype(np.float32)


def _numpy_topk(blocks, q, k: int, keep) -> list:
    """Scores every row in float32, then rescores exactly (float64) every row within the float32
    bound of the k-th best: 4 (d + 16) 2^-24 |q|, the C code's float32 bound, doubled. Rows
    whose norm is outside the bound's range and non-finite scores are rescored too."""
    wanted = None if keep is None else np.fromiter(keep, np.int64, len(keep))
    parts = []  # (block, the indexes of its rows kept, their float32 scores)
    for block in blocks:
        with np.errstate(over="ignore", invalid="ignore"):
            approx = (block.rows @ q) * block.inv_norms
        every = wanted is None
        take = np.arange(len(approx)) if every else np.flatnonzero(np.isin(block.ids, wanted))
        parts.append((block, take, approx[take]))
    approx = np.concatenate([a for _, _, a in parts]) if parts else np.empty(0, np.float32)
    n = len(approx)
    if n == 0:
        return []
    inv = np.concatenate([b.inv_norms[t] for b, t, _ in parts])
    owner = np.concatenate([np.full(len(t), j) for j, (_, t, _) in enumerate(parts)])
    local = np.concatenate([t for _, t, _ in parts])
    q64 = q.astype(np.float64)
    qq = float(q64 @ q64)
    lo, hi = SAFE_SQUARED_NORMS
    if k >= n or not lo <= qq <= hi:
        idx = np.arange(n)
    else:
        err = (len(q) + 16) * 2.0**-22 * math.sqrt(qq)
        finite = np.isfinite(approx)
        kth = np.partition(np.where(finite, approx, -np.inf), n - k)[n - k]
        unsafe = (inv > 0) & ((inv < hi**-0.5) | (inv > lo**-0.5))
        idx = np.flatnonzero((approx >= kth - 2 * err) | ~finite | unsafe)
    rows = np.array([parts[owner[i]][0].rows[local[i]] for i in idx], dtype=np.float64)
    ids = [int(parts[owner[i]][0].ids[local[i]]) for i in idx]
    m64 = rows.reshape(len(idx), len(q))
    denom = np.sqrt((m64 * m64).sum(axis=1) * qq)
    exact = np.clip(np.divide(m64 @ q64, denom, out=np.zeros(len(idx)), where=denom > 0), -1, 1)
    best = sorted(zip(exact.tolist(), ids, strict=True), key=lambda h: (-h[0], h[1]))[:k]
    return [[i, s] for s, i in best]


def _python_topk(blocks, q, k: int, keep) -> list:
    """Exact cosine of every row in float64 (math.fsum), kept in a heap of the k best."""
    qq = math.fsum(x * x for x in q)
    heap = []  # (score, -id): the root is the worst kept row
    for block in blocks:
        for row_id, v in zip(block.ids, block.rows, strict=True):
            if keep is not None and row_id not in keep:
                continue
            vv = math.fsum(x * x for x in v)
            dot = math.fsum(x * y for x, y in zip(q, v, strict=True))
            score = 0.0 if qq == 0 or vv == 0 else max(-1.0, min(1.0, dot / math.sqrt(qq * vv)))
            item = (score, -row_id)
            if len(heap) < k:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
    return [[-i, s] for s, i in sorted(heap, key=lambda h: (-h[0], -h[1]))]
