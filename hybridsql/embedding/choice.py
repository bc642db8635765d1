"""Which model embeds for an index: the one it records as the maker of its vectors, unless the
caller names one; a model named that is not the index's is one line that says what to do.

An index records its model (db/schema.py, index_model: id, provider, name, dims, fingerprint).
``--model NAME`` (``model=``) names a model of hybridsql's own engine, the local provider's;
``--embedder`` names the provider (auto, local, openai:MODEL, llm:MODEL_ID, none), so
``--model`` goes with auto or local alone. Neither named: the index's model, whatever its
provider; an index that records none gets the default (auto: the local model where installed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hybridsql.embedding import models
from hybridsql.embedding.local_model import LocalProvider
from hybridsql.embedding.providers import LLMProvider, OpenAIProvider, resolve_provider
from hybridsql.errors import EmbeddingError, ModelMismatchError

REINDEX = "hybridsql index DIR --db {db} {flag} --reembed"


def provider_kind(provider) -> str:
    """What an index records as a provider's kind: local (hybridsql's engine, which SQL
    embed() runs), openai, llm or other."""
    if isinstance(provider, LocalProvider):
        return "local"
    if isinstance(provider, OpenAIProvider):
        return "openai"
    if isinstance(provider, LLMProvider):
        return "llm"
    return "other"


def provider_name(provider) -> str:
    """The name a provider's model is chosen by (a local model's name, else its model id)."""
    return getattr(provider, "name", None) or provider.model_id


def flag(kind: str, name: str) -> str:
    """The command line's words that choose a model of ``kind`` called ``name``."""
    if kind == "local":
        return f"--model {name}"
    if kind in ("openai", "llm"):
        return f"--embedder {kind}:{name}"
    return f"the provider that made {name}"


@dataclass
class Missing:
    """The index's model, which this client cannot find or make: ``line`` says how to get it.
    A search runs keyword-only with that line as its note; a write refuses with it."""

    line: str


def choose(
    recorded: dict | None,
    embedder: str | None,
    model,
    options: dict,
    db: str = "FILE",
):
    """The provider for an index that records ``recorded`` (None: no model yet), asked for as
    ``embedder`` (a provider's name or None: $HYBRIDSQL_EMBEDDER, else auto) and ``model`` (a
    local model's name or path, or None): a provider, None (keyword-only), or a Missing. Raises
    EmbeddingError where the two do not go together."""
    spec = (embedder or os.environ.get("HYBRIDSQL_EMBEDDER") or "auto").strip()
    kind, colon, _ = spec.partition(":")
    kind = kind.strip().lower()
    local = kind in ("auto", "local") and not colon
    if model is not None and not local:
        raise EmbeddingError(
            f"--model names a model of hybridsql's own engine, for the local provider; with"
            f" --embedder {spec}, name its model there (openai:MODEL, llm:MODEL_ID)"
        )
    if kind == "none" and not colon:
        return None
    if not local:
        return resolve_provider(spec, **options)
    from hybridsql.db import _native

    if not _native.built():
        # The engine is the library's: none to run a local model here. Named, that is an error;
        # otherwise keyword-only, with the line where the index has vectors of a local model.
        from hybridsql.db.extension import library_missing

        if kind == "local" or model is not None or os.environ.get("HYBRIDSQL_MODEL"):
            raise EmbeddingError(library_missing(_native.PATH))
        if recorded is not None and recorded["provider"] == "local":
            return Missing(library_missing(_native.PATH))
        return resolve_provider(spec, **options)
    if model is not None or os.environ.get("HYBRIDSQL_MODEL"):
        return LocalProvider(model=model, **options)
    if recorded is None:
        return resolve_provider(spec, **options)
    if recorded["provider"] != "local":
        # Not named, and not one this client can make alone: keyword-only, as a local model
        # whose file is missing (a write refuses with the line).
        return Missing(
            f"this index was made by {recorded['model_id']} (provider"
            f" {recorded['provider']}): search it with"
            f" {flag(recorded['provider'], recorded['model_id'])}, or re-index it with a local"
            f" model: `{REINDEX.format(db=db, flag='--embedder local')}`"
        )
    if not models.is_model_id(recorded["model_id"]):
        raise ModelMismatchError(
            f"{db}: the index records a model whose id is no model's name; re-index it:"
            f" `{REINDEX.format(db=db, flag='--embedder local')}`"
        )
    found = models.named(recorded["model_id"])
    if not found.path.is_file() and not found.makeable:
        return Missing(
            f"this index was made by the model {found.name}, which this client cannot find:"
            f" {found.how_to_get()}"
        )
    return LocalProvider(model=found.name, **options)


def check(recorded: dict | None, provider, reembed: bool, db: str = "FILE") -> None:
    """Raises ModelMismatchError where ``provider`` is not the model that made the index's
    vectors (``recorded``), unless ``reembed`` (its vectors are then replaced)."""
    if recorded is None or provider is None or reembed:
        return
    if recorded["model_id"] == provider.model_id:
        return
    kind, name = provider_kind(provider), provider_name(provider)
    made = recorded["name"] or recorded["model_id"]
    raise ModelMismatchError(
        f"{db}: this index was made by {made}; search it with that model"
        f" ({flag(recorded['provider'], made)}, or none named), or re-index it with {name}:"
        f" `{REINDEX.format(db=db, flag=flag(kind, name))}`"
    )
