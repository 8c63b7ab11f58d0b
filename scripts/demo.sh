#!/usr/bin/env bash
# Sets up a fresh Debian machine and runs Trove's main job offline: starts two image origins on
# 127.0.0.1 over the same sample images (`trove origin --make-samples`), one letting caches keep
# its images an hour (Cache-Control: max-age=3600), one making them ask every time (no-cache);
# fetches the images and their 256 px WebP variants through the pipeline (`trove fetch`), then
# again: memory and disk hits, and 304 revalidations from the no-cache origin; checks the bytes
# against the origin's files; prints `trove stats`; stops the origins.
#
# The store is a new one in a temporary directory, removed afterwards, unless TROVE_STORE names
# one. Nothing is left running, whatever happens: the origins are stopped on every exit.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/bootstrap.sh
swift build -c release --product trove >&2
trove="$PWD/.build/release/trove"

work=$(mktemp -d)
origins=()
# SIGTERM to every origin started, then SIGKILL to any still running after 5 s.
stop_origins() {
  local pid
  for pid in "${origins[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local running=0
    for pid in "${origins[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
    [ "$running" = 0 ] && break
    sleep 0.1
  done
  for pid in "${origins[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  origins=()
}
trap 'stop_origins; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

export TROVE_STORE="${TROVE_STORE:-$work/store}"

# Starts `trove origin IMAGES ARGS…` in the background and sets $base_url once it listens.
start_origin() {
  local name=$1
  shift
  "$trove" origin "$work/images" --port-file "$work/$name.port" "$@" >/dev/null 2>"$work/$name.log" &
  origins+=($!)
  for _ in $(seq 600); do
    if [ -s "$work/$name.port" ]; then
      base_url="http://127.0.0.1:$(cat "$work/$name.port")"
      return
    fi
    kill -0 "${origins[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "demo: the $name origin did not start:" >&2
  cat "$work/$name.log" >&2
  exit 1
}

echo "== two origins on loopback over 4 sample images (3 JPEG, 1 PNG, 1600×1200)"
start_origin photos --make-samples 4 --cache-control "max-age=3600"
photos=$base_url
start_origin live --cache-control "no-cache"
live=$base_url
for file in "$work/images"/*; do printf '   %-14s %8d bytes\n' "${file##*/}" "$(stat -c %s "$file")"; done
echo "   $photos  Cache-Control: max-age=3600"
echo "   $live  Cache-Control: no-cache"

urls=("$photos/sample-1.jpg" "$photos/sample-2.jpg" "$photos/sample-4.png" "$live/sample-3.jpg")

echo
echo "== first pass: originals from the origins, then 256 px WebP variants made from the stored originals"
"$trove" fetch "${urls[@]}"
"$trove" fetch --size 256x256 "${urls[@]}"

echo
echo "== second pass: the store serves what is fresh (disk), the no-cache origin answers 304 (revalidated);"
echo "   a URL named twice in one call is fetched once (its second line: memory)"
"$trove" fetch -O "$work/out" "${urls[@]}" "${urls[0]}"
"$trove" fetch --size 256x256 "${urls[@]}" "${urls[0]}"

for url in "${urls[@]}"; do
  name=${url##*/}
  cmp -s "$work/images/$name" "$work/out/$name" || { echo "demo: $name came back different" >&2; exit 1; }
done
echo "   the originals written with -O are byte for byte the origin's files"

echo
echo "== trove stats"
"$trove" stats

stop_origins
echo
echo "== origins stopped"
