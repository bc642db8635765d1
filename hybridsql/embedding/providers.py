"""The embedding providers other than the local model (OpenAI-compatible HTTP, the ``llm``
package's models), what every provider offers (EmbeddingProvider), and resolve_provider, which
picks one by name.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from hybridsql.embedding.local_model import LocalProvider, _local_available
from hybridsql.errors import EmbeddingError

if TYPE_CHECKING:
    import numpy as np

_log = logging.getLogger("hybridsql.embed")

_warned_no_local = False


class EmbeddingProvider(Protocol):
    """What Embedder needs from a provider. Optional: ``window`` (the most tokens it reads at
    once; chunks are sized to it), ``count_tokens(texts)`` (its tokenizer's counts, to size
    them exactly) and ``revision`` (part of the cache key: a change that changes vectors)."""

    model_id: str
    dims: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 array of shape (len(texts), dims)."""


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
        # Here, not at the top: they are a third of a keyword search's imports, which asks
        # for no embedding.
        import http.client
        import urllib.error
        import urllib.request

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
                import email.utils

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
