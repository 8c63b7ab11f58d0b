#!/usr/bin/env bash
# Sets up a fresh Debian machine and runs Trove's whole test suite:
#   1. installs the system libraries Trove needs (scripts/bootstrap.sh), and lints the code
#      with the toolchain's swift-format and the settings in .swift-format (`swift format -i -r
#      Sources Tests` fixes what it reports);
#   2. builds and runs every test (swift test), and checks that a program on TroveStore alone
#      links no image library (scripts/check-store-links.sh);
#   3. runs the concurrency, store, crash and compaction suites, the memory tier's and the
#      pipeline's again under ThreadSanitizer (skip with TROVE_SKIP_TSAN=1);
#   4. builds the Benchmarks/ package, so the benchmarks keep compiling against the library
#      (skip with TROVE_SKIP_BENCHMARKS_BUILD=1; running them is `trove bench`, not a test).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/bootstrap.sh
swift format lint --strict -r Sources Tests Package.swift

swift build --build-tests
bash scripts/check-store-links.sh
swift test

if [ "${TROVE_SKIP_TSAN:-0}" != "1" ]; then
  echo "== ThreadSanitizer: concurrency, store, crash, compaction, memory-tier and pipeline suites"
  swift test --sanitize=thread --scratch-path .build-tsan \
    --filter "ConcurrencyTests|StoreTests|CrashTests|CompactionTests|MemoryCache|PipelineTests|PipelineThreadingTests"
fi

if [ "${TROVE_SKIP_BENCHMARKS_BUILD:-0}" != "1" ]; then
  echo "== Building the Benchmarks/ package"
  swift build --package-path Benchmarks
fi
