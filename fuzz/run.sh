#!/usr/bin/env bash
# Runs the fuzzers (see fuzz/README.md). Seeds come from fuzz/corpus/<harness>/, read-only; new
# inputs go to fuzz/build/corpus-<harness>/, crashes to fuzz/build/crash-<harness>-*.
#   fuzz/run.sh short                    CI: 30 s of sql, 15 s of tokenizer, unigram, model,
#                                        lookup, tokenizer_library, keyword_plan, functions,
#                                        shadow
#   fuzz/run.sh long                     an hour of each harness, then 40,000 oracle statements on
#                                        every SQLite and the replication kill test over 300 seeds
#   fuzz/run.sh HARNESS RUNS [SECONDS]   one harness (sql, tokenizer, unigram, model, lookup,
#                                        tokenizer_library, keyword_plan, functions, shadow) for
#                                        RUNS executions or SECONDS (default 3600), whichever is
#                                        first
# sql, tokenizer, unigram, model and lookup need fuzz/build.sh first; the atheris harnesses need
# `pip install atheris` and hybridsql.
set -euo pipefail
cd "$(dirname "$0")/.."
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$PWD/fuzz/ubsan.supp"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"

fuzz() {  # harness runs seconds
  local name=$1 work=fuzz/build/corpus-$1
  mkdir -p "$work"
  local cmd=(python3 "fuzz/fuzz_$name.py") extra=()
  case $name in
    sql) cmd=(fuzz/build/fuzz_sql) ;;
    tokenizer) cmd=(fuzz/build/fuzz_tokenizer) extra=(-max_len=40000) ;;  # past the prefixes
    unigram) cmd=(fuzz/build/fuzz_unigram) extra=(-max_len=65536) ;;  # the seeds' sections
    model) cmd=(fuzz/build/fuzz_model) extra=(-max_len=40000) ;;  # the seeds' 20 KB and a layer
    # SQL, or a database image of the tiny model's 20 KB and more; the schemas' words
    lookup) cmd=(fuzz/build/fuzz_lookup) extra=(-max_len=65536 -dict=fuzz/lookup.dict) ;;
  esac
  "${cmd[@]}" -runs="$2" -max_total_time="$3" -print_final_stats=1 -timeout=60 "${extra[@]}" \
    -rss_limit_mb=4096 -artifact_prefix="fuzz/build/crash-$name-" "$work" "fuzz/corpus/$name"
}

if [ "$1" = short ]; then
  fuzz sql -1 30
  fuzz tokenizer -1 15
  fuzz unigram -1 15
  fuzz model -1 15
  fuzz lookup -1 15
  fuzz tokenizer_library -1 15
  fuzz keyword_plan -1 15
  fuzz functions -1 15
  fuzz shadow -1 15
elif [ "$1" = long ]; then
  for name in sql tokenizer unigram model lookup tokenizer_library keyword_plan functions shadow; do
    fuzz "$name" -1 3600
  done
  HYBRIDSQL_ORACLE_STATEMENTS=40000 pytest -q tests/test_vector_index_oracle.py
  HYBRIDSQL_REPLICATION_SEEDS=300 pytest -q tests/test_replication.py -k killed_writers
else
  fuzz "$1" "$2" "${3:-3600}"
fi
