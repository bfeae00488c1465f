#!/bin/sh
# publish.sh SRC DEST — copies the result to its destination atomically:
# copy to a temporary name beside DEST, then rename. Idempotent.
set -eu
src=$1 dest=$2
mkdir -p "$(dirname "$dest")"
cp "$src" "$dest.tmp"
mv "$dest.tmp" "$dest"
echo "published $dest"
