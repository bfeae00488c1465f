#!/bin/sh
# stats.sh RAW_CSV — prints summary figures and publishes them to dependent
# steps through $APOLLO_OUTPUT (key=value lines).
set -eu
awk -F, 'NR > 1 { s += $5; if ($5 > m) m = $5 } END { printf "orders=%d\ntotal=%.2f\nlargest=%.2f\n", NR - 1, s, m }' "$1" \
  | tee "${APOLLO_OUTPUT:-/dev/null}"
