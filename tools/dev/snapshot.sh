#!/usr/bin/env bash
# Packs HEAD plus the named working-tree paths into .devsnap/tree.tgz, so that a device run builds
# exactly that tree even while other work in progress sits in the working copy. On the device:
#   mkdir -p /tmp/t && tar xzf .devsnap/tree.tgz -C /tmp/t && cp -r .deps /tmp/t/ && cd /tmp/t
# Usage: tools/dev/snapshot.sh [PATH...]
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .devsnap && mkdir -p .devsnap/tree
git archive HEAD | tar -x -C .devsnap/tree
for p in "$@"; do
  mkdir -p ".devsnap/tree/$(dirname "$p")"
  cp -r "$p" ".devsnap/tree/$p"
done
tar czf .devsnap/tree.tgz -C .devsnap/tree .
rm -rf .devsnap/tree
du -h .devsnap/tree.tgz
