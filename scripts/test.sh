#!/usr/bin/env bash
# Sets up a fresh Debian machine and runs Trove's whole test suite:
#   1. installs the system libraries Trove needs (scripts/bootstrap.sh), and lints the code
#      with the toolchain's swift-format and the settings in .swift-format (`swift format -i -r
#      Sources Tests` fixes what it reports);
#   2. builds and runs every test (swift test; the HTTP and pipeline suites in a second run of
#      their own), and checks that a program on TroveStore alone links no image library
#      (scripts/check-store-links.sh);
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
# The suites that talk HTTP on loopback run on their own: Swift Testing runs every suite at
# once, and the CPU-bound ones (codecs) hold the few cooperative threads for seconds at a time,
# which the HTTP suites would count against their timeouts. The pipeline's suites (which decode
# and encode images) and the HTTP origin's run apart from each other for the same reason: on a
# slow 2-core machine, together they missed 0.3–5 s timeouts (each alone passes in ~10 s).
# (Test code that blocks — the repair property's stores, crash rounds, child processes — waits
# on threads of its own: offPool.)
network="^(TroveHTTPTests|TrovePipelineTests)\."
swift test --skip-build --skip "$network"
swift test --skip-build --filter "^TroveHTTPTests\."
swift test --skip-build --filter "^TrovePipelineTests\."

if [ "${TROVE_SKIP_TSAN:-0}" != "1" ]; then
  echo "== ThreadSanitizer: concurrency, store, crash, compaction, memory-tier and pipeline suites"
  # TROVE_TSAN=1: stress tests run a tenth of their operations (TestData.swift says why).
  TROVE_TSAN=1 swift test --sanitize=thread --scratch-path .build-tsan --filter "ConcurrencyTests|StoreTests|CrashTests|CompactionTests|MemoryCache"
  TROVE_TSAN=1 swift test --sanitize=thread --scratch-path .build-tsan --skip-build \
    --filter "^TrovePipelineTests\.(PipelineTests|PipelineThreadingTests)/"
fi

if [ "${TROVE_SKIP_BENCHMARKS_BUILD:-0}" != "1" ]; then
  echo "== Building the Benchmarks/ package"
  swift build --package-path Benchmarks
fi
