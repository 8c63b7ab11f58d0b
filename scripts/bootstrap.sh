#!/usr/bin/env bash
# Installs the Debian packages Trove builds against, when any is missing.
# Idempotent and quiet when everything is present; works as root or through sudo.
set -euo pipefail

packages=(pkg-config libsqlite3-dev libxxhash-dev libwebp-dev libspng-dev libturbojpeg0-dev)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "bootstrap: missing ${missing[*]}; run as root or install sudo" >&2
  exit 1
fi

echo "bootstrap: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >/dev/null
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
