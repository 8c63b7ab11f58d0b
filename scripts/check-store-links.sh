#!/usr/bin/env bash
# Proves that a program built on TroveStore alone links no image library: the ELF NEEDED
# entries of CrashWriter (which depends on TroveStore only) name none of libwebp, libturbojpeg,
# libspng — while the `trove` tool (which has the codecs) names them, so the check can fail.
# Run after `swift build --build-tests`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(swift build --show-bin-path)"
images='libwebp|libsharpyuv|libturbojpeg|libspng'
needed() { readelf -d "$1" | awk '/\(NEEDED\)/ { gsub(/[][]/, "", $NF); print $NF }'; }
if ! needed "$bin/trove" | grep -Eq "$images"; then
  echo "check-store-links: trove links no image library; the check below would prove nothing" >&2
  exit 1
fi
if needed "$bin/CrashWriter" | grep -E "$images"; then
  echo "check-store-links: a TroveStore-only program links an image library (above)" >&2
  exit 1
fi
echo "check-store-links: TroveStore alone links: $(needed "$bin/CrashWriter" | tr '\n' ' ')"
