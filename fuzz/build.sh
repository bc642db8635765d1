#!/usr/bin/env bash
# Builds fuzz/build/fuzz_sql: every C file of csrc/ (the library) with libFuzzer
# coverage, ASan and UBSan, linked with the harness (instrumented by the sanitizers only, so its
# input decoding costs little) and the system libsqlite3; and fuzz/build/fuzz_tokenizer:
# csrc/model/tokenizer.c so, with the model's vocabulary written to fuzz/build/vocab.bin as the
# model file stores it; fuzz/build/fuzz_unigram: the tokenizers' interface and
# csrc/model/unigram.c so, with its section written to fuzz/build/unigram.bin by
# fuzz/unigram_seed.py; and fuzz/build/fuzz_model: the model loader of csrc/model/load.c and the
# SQL ways to it (hybridsql_model() of a BLOB or a file) of csrc/model/embedsql.c, linked as
# fuzz_sql is (with the whole library: embed() reaches SQLite through functions/args.c); and
# fuzz/build/fuzz_lookup: embed()'s lookup of a database's own model (embedsql.c), likewise. Needs
# clang and libsqlite3-dev. UBSan's checks are recoverable only so that fuzz/ubsan.supp can name
# known bugs; run.sh halts on every other report.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p fuzz/build
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' hybridsql/__init__.py)
FLAGS=(-g -O2 -fno-omit-frame-pointer -fsanitize-recover=undefined -Wall -Wextra -Werror
       -DSQLITE_CORE -Icsrc "-DHYBRIDSQL_VERSION=\"$VERSION\"")
# Each C file of csrc/ into fuzz/build/lib/, named by its path (vector_index/scan.c: vector_index-scan.o).
rm -rf fuzz/build/lib && mkdir -p fuzz/build/lib
LIBRARY=()
while IFS= read -r source; do
  name=${source#csrc/}
  object="fuzz/build/lib/${name//\//-}"
  object="${object%.c}.o"
  clang "${FLAGS[@]}" -fsanitize=fuzzer-no-link,address,undefined -c "$source" -o "$object"
  LIBRARY+=("$object")
done < <(find csrc -name '*.c' | sort)
clang "${FLAGS[@]}" -fsanitize=address,undefined -c fuzz/fuzz_sql.c -o fuzz/build/fuzz_sql.o
clang -fsanitize=fuzzer,address,undefined fuzz/build/fuzz_sql.o "${LIBRARY[@]}" -lsqlite3 -lm \
  -o fuzz/build/fuzz_sql
clang "${FLAGS[@]}" -fsanitize=address,undefined -c fuzz/fuzz_model.c -o fuzz/build/fuzz_model.o
clang -fsanitize=fuzzer,address,undefined fuzz/build/fuzz_model.o "${LIBRARY[@]}" -lsqlite3 -lm \
  -o fuzz/build/fuzz_model
clang "${FLAGS[@]}" -fsanitize=address,undefined -c fuzz/fuzz_lookup.c -o fuzz/build/fuzz_lookup.o
clang -fsanitize=fuzzer,address,undefined fuzz/build/fuzz_lookup.o "${LIBRARY[@]}" -lsqlite3 -lm \
  -o fuzz/build/fuzz_lookup
clang "${FLAGS[@]}" -fsanitize=address,undefined -c fuzz/fuzz_tokenizer.c \
  -o fuzz/build/fuzz_tokenizer.o
clang -fsanitize=fuzzer,address,undefined fuzz/build/fuzz_tokenizer.o \
  fuzz/build/lib/model-tokenizer.o fuzz/build/lib/model-unigram.o -o fuzz/build/fuzz_tokenizer
clang "${FLAGS[@]}" -fsanitize=address,undefined -c fuzz/fuzz_unigram.c -o fuzz/build/fuzz_unigram.o
clang -fsanitize=fuzzer,address,undefined fuzz/build/fuzz_unigram.o \
  fuzz/build/lib/model-tokenizer.o fuzz/build/lib/model-unigram.o -o fuzz/build/fuzz_unigram
# fuzz_unigram's own section (XLM-R's charsmap, 3,000 pieces): hybridsql's writer, pure Python.
PYTHONPATH="$PWD" python3 fuzz/unigram_seed.py --section fuzz/build/unigram.bin
python3 - <<'EOF'
import json

with open("hybridsql/data/tokenizer.json", encoding="utf-8") as f:
    vocab = json.load(f)["model"]["vocab"]
with open("fuzz/build/vocab.bin", "wb") as f:
    f.write(b"".join(piece.encode() + b"\0" for piece in sorted(vocab, key=vocab.get)))
EOF
