"""The vector top-k of the numpy and pure-Python backends, read from vector_index's own storage.

A ``vector_index`` table (csrc/vector_index/, Requirement 10) keeps its rows in shadow tables of the
same file: ``T_blocks`` (one row per block of up to 256 rows of one partition, with a nonce that
changes with every write: from storage format 3 the block's checksum, which this reader checks as
the extension does), ``T_codes`` (each block's records: the row ids come from there),
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

from hybridsql.errors import DatabaseError, QueryError

BLOCK_GROUPS = 256  # T_vectors ids: block * 256 + group
BLOCK_ROWS = 256  # the most rows a block has room for: HS_BLOCK_ROWS
MAX_DIMS = 65536  # HS_MAX_DIMS
REC_HEAD = 16
SUM_CHUNK = 256  # HS_SUM_CHUNK
MASK64 = (1 << 64) - 1
SAFE_SQUARED_NORMS = (1e-20, 1e20)  # where the float32 bound holds: HS_SAFE_LO/HI in the C code


def record_stride(dims: int) -> int:
    return REC_HEAD + ((dims + 7) & ~7)


def codes_bytes(capacity: int, dims: int, numeric: int) -> int:
    """The length of a block's T_codes row: its records, then each numeric metadata column's
    values and NULL flags (block_bytes in the C code)."""
    return capacity * record_stride(dims) + numeric * (capacity * 8 + ((capacity + 7) & ~7))


_SUM_WEIGHTS = np.arange(1, 2 * (SUM_CHUNK // 4), 2, dtype=np.uint64)
_SUM_KEYS = (
    np.uint32(0x9E3779B9) ^ (np.arange(SUM_CHUNK // 8, dtype=np.uint32) * np.uint32(0x01010101)),
    np.uint32(0x7F4A7C15) ^ (np.arange(SUM_CHUNK // 8, dtype=np.uint32) * np.uint32(0x01010101)),
)


def _chunk_sums(words) -> np.ndarray:
    """chunk_sum of each row of a (chunks, words) uint32 matrix, mod 2^64."""
    w = words.astype(np.uint64)
    half = words.shape[1] // 2
    lin = (w * _SUM_WEIGHTS[: words.shape[1]]).sum(axis=1)
    a = (words[:, :half] ^ _SUM_KEYS[0][:half]).astype(np.uint64)
    b = (words[:, half : 2 * half] ^ _SUM_KEYS[1][:half]).astype(np.uint64)
    return lin + (a * b).sum(axis=1)


def codes_sum(data: bytes) -> int:
    """Format 3's checksum of a whole T_codes row (codes_sum in the C code): 256-byte chunks of
    32-bit words, each chunk's sum times 2c + 1 for its position c, all mod 2^64."""
    words = np.frombuffer(data, dtype="<u4", count=len(data) // 4)
    per = SUM_CHUNK // 4
    whole = len(words) // per
    sums = [_chunk_sums(words[: whole * per].reshape(whole, per))] if whole else []
    if len(words) % per:
        sums.append(_chunk_sums(words[whole * per :].reshape(1, -1)))
    if not sums:
        return 0
    sums = np.concatenate(sums)
    return int((sums * np.arange(1, 2 * len(sums), 2, dtype=np.uint64)).sum())


def _mix64(x: int) -> int:
    """splitmix64's finaliser, as the C code's mix64."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def _value_hash(values) -> int:
    """hash_values in the C code: a block's partition values (3 and 3.0 the same)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        if isinstance(v, (int, float)):
            x = int.from_bytes(np.float64(v).tobytes(), "little")
        elif v is None:
            x = 5
        else:
            x = 3 if isinstance(v, str) else 4
            for byte in v.encode("utf-8", "surrogatepass") if isinstance(v, str) else v:
                x = (x * 31 + byte) & MASK64
        h = _mix64(h ^ x)
    return h


def block_checksum(block_id, dims, capacity, count, parts, codes: bytes) -> int:
    """Format 3's nonce of a block (block_head + codes_sum), as a signed 64-bit integer."""
    head = (
        _mix64((block_id ^ 0x243F6A8885A308D3) & MASK64)
        + _mix64((dims ^ 0x13198A2E03707344) & MASK64)
        + _mix64((capacity ^ 0xA4093822299F31D0) & MASK64)
        + _mix64((count ^ 0x082EFA98EC4E6C89) & MASK64)
        + _value_hash(parts)
    )
    total = (head + codes_sum(codes)) & MASK64
    return total - (1 << 64) if total >> 63 else total


_COLUMN = re.compile(r'\s*("(?:[^"]|"")+"|`[^`]+`|\[[^\]]+\]|[\w\x80-\uffff]+)\s*(.*)', re.S)


def quoted(*names: str) -> str:
    """A schema-qualified SQL identifier: each name in double quotes, doubled inside."""
    return ".".join('"' + n.replace('"', '""') + '"' for n in names)


def table_columns(conn, table: str, schema: str = "main") -> tuple:
    """(partition columns, metadata columns) of a vector_index table, in declared order."""
    partitions, metadata, _ = _columns(conn, table, schema)
    return partitions, metadata


def _columns(conn, table: str, schema: str) -> tuple:
    """table_columns, and how many metadata columns are integer or real (their values are in
    each block's T_codes row)."""
    master = quoted(schema, "sqlite_schema")
    row = conn.execute(
        f"select sql from {master} where type = 'table' and name = ?", (table,)
    ).fetchone()
    if row is None or not re.search(r"using\s+vector_index\s*\(", row[0], re.I):
        raise QueryError(f"{table} is not a vector_index table")
    body = row[0][row[0].index("(") + 1 : row[0].rindex(")")]
    partitions, metadata, numeric = [], [], 0
    for arg in body.split(","):
        m = _COLUMN.match(arg)
        name, words = m.group(1), " ".join(m.group(2).lower().split())
        if name[0] in '"`[':
            name = name[1:-1].replace('""', '"')
        if words.startswith("float[") or words == "integer primary key":
            continue
        (partitions if words.endswith(" partition key") else metadata).append(name)
        numeric += words in ("integer", "real")
    return partitions, metadata, numeric


class Block:
    """One block as read at ``nonce``: its row ids and vectors (float32 and their inverse norms
    for numpy; array('f') rows for pure Python)."""

    def __init__(self, block_id, nonce, ids, rows, inv_norms=None):
        self.id = block_id
        self.nonce = nonce
        self.ids = ids
        self.rows = rows
        self.inv_norms = inv_norms


class VectorReader:
    """Top-k over a vector_index table without the extension; ``math`` is "numpy" or "python".

    A damaged block is met as the extension meets it: a block row out of range, a codes or
    vectors row of the wrong length, a block that does not add up to its checksum (format 3),
    or an answered row that is not where ``T_rowids`` says, raise DatabaseError naming the table
    and the block."""

    def __init__(self, conn, table: str = "vectors", schema: str = "main", math_: str = "numpy"):
        if math_ not in ("numpy", "python"):
            raise ValueError(f"math must be numpy or python, not {math_!r}")
        self.conn = conn
        self.table = table
        self.schema = schema
        self.math = math_
        self.partitions, _, self.numeric = _columns(conn, table, schema)
        self.blocks = {}  # block id -> Block

    def _name(self, suffix: str) -> str:
        return quoted(self.schema, f"{self.table}_{suffix}")

    def _damaged(self, block_id, problem: str) -> DatabaseError:
        return DatabaseError(f"{self.table}: block {block_id} is damaged: {problem}")

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

    def _check_row(self, block_id, dims, capacity, count) -> None:
        """A block row's numbers are integers in range (block_problem in the C code)."""
        for name, value in (("dims", dims), ("capacity", capacity), ("count", count)):
            if not isinstance(value, int):
                kind = {float: "real", str: "text", bytes: "blob"}.get(type(value), "null")
                raise self._damaged(block_id, f"its {name} is of type {kind}, not integer")
        if not 1 <= dims <= MAX_DIMS:
            raise self._damaged(block_id, f"it has {dims} dimensions, not 1 to {MAX_DIMS}")
        if not 1 <= capacity <= BLOCK_ROWS:
            raise self._damaged(block_id, f"it has room for {capacity} rows, not 1 to {BLOCK_ROWS}")
        if not 1 <= count <= capacity:
            raise self._damaged(block_id, f"it holds {count} rows in room for {capacity}")

    def _read(self, block_id, nonce, count, dims, capacity, parts, checksum) -> Block:
        stride = record_stride(dims)
        row = self.conn.execute(
            f"select cast(data as blob) from {self._name('codes')} where id = ?", (block_id,)
        ).fetchone()
        want = codes_bytes(capacity, dims, self.numeric)
        if row is None or not isinstance(row[0], bytes):
            raise self._damaged(block_id, "its codes row is missing")
        codes = row[0]
        if len(codes) != want:
            raise self._damaged(block_id, f"its codes row has {len(codes)} bytes, not {want}")
        if checksum and block_checksum(block_id, dims, capacity, count, parts, codes) != nonce:
            raise self._damaged(
                block_id, "its records, count or partition do not match its checksum"
            )
        base = block_id * BLOCK_GROUPS
        groups = self.conn.execute(
            f"select id, cast(data as blob) from {self._name('vectors')} where id between ? and ?"
            " order by id",
            (base, base + BLOCK_GROUPS - 1),
        ).fetchall()
        # A block's groups are of one size, a whole number of vectors (the layout's: see
        # vector_sql), and hold at least its rows.
        size = None
        for n, (gid, data) in enumerate(groups):
            if gid != base + n or not isinstance(data, bytes):
                raise self._damaged(block_id, f"its vectors row {base + n} is missing")
            if size is None and (not data or len(data) % (4 * dims)):
                raise self._damaged(
                    block_id,
                    f"its vectors row {gid} has {len(data)} bytes, not a whole number of"
                    f" {dims}-dimension vectors",
                )
            size = size or len(data)
            if len(data) != size:
                raise self._damaged(
                    block_id,
                    f"its vectors row {gid} has {len(data)} bytes, its row {base} has {size}",
                )
        held = len(groups) * (size or 0) // (4 * dims)
        if held < count:
            raise self._damaged(block_id, f"its vectors rows hold {held} rows, not {count}")
        data = b"".join(g[1] for g in groups)[: 4 * dims * count]
        if self.math == "numpy":
            recs = np.frombuffer(codes, dtype=np.uint8, count=count * stride).reshape(count, stride)
            ids = recs[:, :8].copy().view("<i8").ravel()
            rows = np.frombuffer(data, dtype="<f4").reshape(count, dims)
            return Block(block_id, nonce, ids, rows, inverse_norms(rows))
        ids = [
            int.from_bytes(codes[i * stride : i * stride + 8], "little", signed=True)
            for i in range(count)
        ]
        rows = [array("f", data[i * 4 * dims : (i + 1) * 4 * dims]) for i in range(count)]
        return Block(block_id, nonce, ids, rows)

    def _selected(self, where: dict):
        """The blocks of the partition ``where`` (column name -> value), read or from memory."""
        conds, params = [], []
        for name, value in where.items():
            if name not in self.partitions:
                raise QueryError(f"{self.table} has no partition column {name}")
            conds.append(f"p{self.partitions.index(name)} is ?")
            params.append(value)
        (fmt,) = self.conn.execute(
            f"select coalesce((select value from {self._name('info')} where key = 'format'), 1)"
        ).fetchone()
        cols = "".join(f", p{i}" for i in range(len(self.partitions)))
        sql = f"select id, dims, capacity, count, nonce{cols} from {self._name('blocks')}"
        if conds:
            sql += " where " + " and ".join(conds)
        out = []
        for block_id, dims, capacity, count, nonce, *parts in self.conn.execute(
            sql + " order by id", params
        ).fetchall():
            self._check_row(block_id, dims, capacity, count)
            block = self.blocks.get(block_id)
            if block is None or block.nonce != nonce or len(block.ids) != count:
                args = (block_id, nonce, count, dims, capacity, parts, fmt >= 3)
                block = self.blocks[block_id] = self._read(*args)
            out.append((dims, block))
        return out

    def _located(self, hits) -> list:
        """The answers [[id, score], ...] of hits [(id, score, block, slot), ...], each checked
        to be where T_rowids says."""
        sql = f"select block, slot from {self._name('rowids')} where id = ?"
        for row_id, _, block, slot in hits:
            if self.conn.execute(sql, (row_id,)).fetchone() != (block.id, slot):
                raise self._damaged(
                    block.id, f"row {row_id} is in its slot {slot}, its location says otherwise"
                )
        return [[row_id, score] for row_id, score, _, _ in hits]

    def topk(self, query: bytes, k: int, where: dict | None = None, ids=None) -> list:
        """The k rows most like ``query`` (a float32 blob) as [[id, score], ...], best first and
        ties by id, among the rows of partition ``where`` whose id is in ``ids`` (all when None)."""
        # One snapshot for the blocks, their rows and the answers' locations: a writer's commit
        # between two of these reads would look like damage. And a savepoint's start makes
        # vector_index write the rows this connection appended and holds (Appended in
        # csrc/vector_index/held.c), which these reads of its shadow tables would otherwise miss.
        self.conn.execute("savepoint hybridsql_topk")
        try:
            return self._topk(query, k, where, ids)
        finally:
            self.conn.execute("release hybridsql_topk")

    def _topk(self, query: bytes, k: int, where: dict | None, ids) -> list:
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
            return self._located(_numpy_topk([b for _, b in chosen], q, k, keep))
        return self._located(_python_topk([b for _, b in chosen], array("f", query), k, keep))


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
    whose norm is outside the bound's range and non-finite scores are rescored too. Returns
    (id, score, block, slot) for each of the k best, best first."""
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
    where = [(parts[owner[i]][0], int(local[i])) for i in idx]
    ids = [int(b.ids[slot]) for b, slot in where]
    m64 = rows.reshape(len(idx), len(q))
    denom = np.sqrt((m64 * m64).sum(axis=1) * qq)
    exact = np.clip(np.divide(m64 @ q64, denom, out=np.zeros(len(idx)), where=denom > 0), -1, 1)
    best = sorted(zip(exact.tolist(), ids, where, strict=True), key=lambda h: (-h[0], h[1]))[:k]
    return [(i, s, block, slot) for s, i, (block, slot) in best]


def _python_topk(blocks, q, k: int, keep) -> list:
    """Exact cosine of every row in float64 (math.fsum), kept in a heap of the k best; returns
    (id, score, block, slot) for each, best first."""
    qq = math.fsum(x * x for x in q)
    heap = []  # (score, -id, -block index, -slot): the root is the worst kept row
    for b, block in enumerate(blocks):
        for slot, (row_id, v) in enumerate(zip(block.ids, block.rows, strict=True)):
            if keep is not None and row_id not in keep:
                continue
            vv = math.fsum(x * x for x in v)
            dot = math.fsum(x * y for x, y in zip(q, v, strict=True))
            score = 0.0 if qq == 0 or vv == 0 else max(-1.0, min(1.0, dot / math.sqrt(qq * vv)))
            item = (score, -row_id, -b, -slot)
            if len(heap) < k:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
    best = sorted(heap, key=lambda h: (-h[0], -h[1]))
    return [(-i, s, blocks[-b], -slot) for s, i, b, slot in best]
