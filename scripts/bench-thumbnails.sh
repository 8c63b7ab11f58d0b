#!/usr/bin/env bash
# The thumbnail benchmark of Docs/Codecs.md: 256 px WebP thumbnails of generated 12–16 MP JPEGs
# and 4–8 MP PNGs by Trove, vipsthumbnail (Debian libvips-tools) and Pillow, in one run.
# Installs what it needs (libvips-tools with apt, Pillow with pip) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
if ! command -v vipsthumbnail >/dev/null 2>&1; then
  sudo=(); [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq >/dev/null
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libvips-tools >/dev/null
fi
python3 -c "import PIL" 2>/dev/null || python3 -m pip install -q pillow
swift build -c release --product trove >&2
.build/release/trove bench --thumbnails "$@"
