#!/usr/bin/env bash
# Builds fuzz/build/fuzz_sql: csrc/hybridsql.c with libFuzzer coverage, ASan and UBSan, linked
# with the harness (instrumented by the sanitizers only, so its input decoding costs little)
# and the system libsqlite3. Needs clang and libsqlite3-dev. UBSan's checks are recoverable
# only so that fuzz/ubsan.supp can name known bugs; run.sh halts on every other report.
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
