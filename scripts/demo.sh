#!/usr/bin/env bash
# Sets up a fresh Debian machine and runs Trove's main job on its default store
# ($XDG_CACHE_HOME/trove, else ~/.cache/trove): stores a few files, reads them back and
# checks them, then prints `trove stats`. Pass --store PATH to use another store.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/bootstrap.sh
swift build -c release --product trove >&2
trove=".build/release/trove"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A few files, two of them with identical bytes under different URLs (stored once).
head -c 200000 /dev/urandom > "$work/photo-1.jpg"
head -c 50000 /dev/urandom > "$work/thumb.webp"
cp "$work/photo-1.jpg" "$work/photo-1-copy.jpg"
printf 'Trove keeps each distinct byte sequence once.\n' > "$work/readme.txt"

declare -A urls=(
  [photo-1.jpg]="https://images.example.com/photos/1.jpg"
  [photo-1-copy.jpg]="https://cdn.example.net/mirror/1.jpg"
  [thumb.webp]="https://images.example.com/thumbs/1.webp"
  [readme.txt]="https://example.com/readme.txt"
)

for name in "${!urls[@]}"; do
  "$trove" put "$@" "${urls[$name]}" "$work/$name" --etag "\"$(md5sum < "$work/$name" | cut -c1-16)\""
done

for name in "${!urls[@]}"; do
  "$trove" get "$@" "${urls[$name]}" -o "$work/back-$name"
  cmp -s "$work/$name" "$work/back-$name" || { echo "demo: $name came back different" >&2; exit 1; }
  echo "stored and read back: ${urls[$name]}"
done

"$trove" stats "$@"
