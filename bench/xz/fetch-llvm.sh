#!/usr/bin/env bash
# Downloads the LLVM 15.0.6 orig tarball (the benchmark's real input) from the
# Debian source archive, without touching the system's apt configuration: a
# private deb-src sources file and a private lists directory live in a temp dir.
# Usage: bench/xz/fetch-llvm.sh [DEST_DIR]   (default /work/cache/llvm-src)
set -euo pipefail

dest=${1:-/work/cache/llvm-src}
file=llvm-toolchain-15_15.0.6.orig.tar.xz
want=076ac9fe372b3141b4fcbee80abfae34f9574fdb959cd8d14a7fd3f39ff89399

mkdir -p "$dest"
if [ -f "$dest/$file" ] && echo "$want  $dest/$file" | sha256sum -c --quiet - 2>/dev/null; then
  echo "$dest/$file"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Same archives as the system's deb entries, but for source packages.
sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$tmp/src.sources"
mkdir -p "$tmp/lists/partial" "$tmp/dl"
opts=(-o Dir::Etc::sourcelist="$tmp/src.sources" -o Dir::Etc::sourceparts=-
      -o Dir::State::Lists="$tmp/lists")
apt-get "${opts[@]}" update >&2
(cd "$tmp/dl" && apt-get "${opts[@]}" source --download-only llvm-toolchain-15=1:15.0.6-4 >&2)
echo "$want  $tmp/dl/$file" | sha256sum -c --quiet -
mv "$tmp/dl/$file" "$dest/$file.part"
mv "$dest/$file.part" "$dest/$file"
echo "$dest/$file"
