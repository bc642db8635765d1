#!/usr/bin/env bash
# Builds fuzz/build/fuzz_sql: csrc/hybridsql.c (with the engine's C files) with libFuzzer
# coverage, ASan and UBSan, linked with the harness (instrumented by the sanitizers only, so its
# input decoding costs little) and the system libsqlite3; and fuzz/build/fuzz_tokenizer:
# csrc/tokenizer.c so, with the model's vocabulary written to fuzz/build/vocab.bin as the model
# file stores it; and fuzz/build/fuzz_model: the model loader of csrc/model.c and the SQL ways
# to it (hybridsql_model() of a BLOB or a file) of csrc/embedsql.c, linked as fuzz_sql is; and
# fuzz/build/fuzz_lookup: embed()'s lookup of a database's own model (embedsql.c), likewise. Needs
# clang and libsqlite3-dev. UBSan's checks are recoverable only so that fuzz/ubsan.supp can name
# known bugs; run.sh halts on every other report.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p fuzz/build
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' hybridsql/__init__.py)
FLAGS=(-g -O2 -fno-omit-frame-pointer -fsanitize-recover=undefined -Wall -Wextra -Werror
       -DSQLITE_CORE -Icsrc "-DHYBRIDSQL_VERSION=\"$VERSION\"")
for source in hybridsql model tokenizer embedsql; do
  clang "${FLAGS[@]}" -fsanitize=fuzzer-no-link,address,undefined -c "csrc/$source.c" \
    -o "fuzz/build/$source.o"
done
clang "${FLAGS[@]}" -fsanitize=address,undefined -c fuzz/fuzz_sql.c -o fuzz/build/fuzz_sql.o
clang -fsanitize=fuzzer,address,undefined fuzz/build/fuzz_sql.o fuzz/build/hybridsql.o \
  fuzz/build/model.o fuzz/build/tokenizer.o fuzz/build/embedsql.o -lsqlite3 -lm \
  -o fuzz/build/fuzz_sql
clang "${FLAGS[@]}" -fsanitize=address,undefined -c fuzz/fuzz_model.c -o fuzz/build/fuzz_model.o
clang -fsanitize=fuzzer,address,undefined fuzz/build/fuzz_model.o fuzz/build/hybridsql.o \
  fuzz/build/model.o fuzz/build/tokenizer.o fuzz/build/embedsql.o -lsqlite3 -lm \
  -o fuzz/build/fuzz_model
clang "${FLAGS[@]}" -fsanitize=address,undefined -c fuzz/fuzz_lookup.c -o fuzz/build/fuzz_lookup.o
clang -fsanitize=fuzzer,address,undefined fuzz/build/fuzz_lookup.o fuzz/build/hybridsql.o \
  fuzz/build/model.o fuzz/build/tokenizer.o fuzz/build/embedsql.o -lsqlite3 -lm \
  -o fuzz/build/fuzz_lookup
clang "${FLAGS[@]}" -fsanitize=address,undefined -c fuzz/fuzz_tokenizer.c \
  -o fuzz/build/fuzz_tokenizer.o
clang -fsanitize=fuzzer,address,undefined fuzz/build/fuzz_tokenizer.o fuzz/build/tokenizer.o \
  -o fuzz/build/fuzz_tokenizer
python3 - <<'EOF'
import json

with open("hybridsql/data/tokenizer.json", encoding="utf-8") as f:
    vocab = json.load(f)["model"]["vocab"]
with open("fuzz/build/vocab.bin", "wb") as f:
    f.write(b"".join(piece.encode() + b"\0" for piece in sorted(vocab, key=vocab.get)))
EOF
