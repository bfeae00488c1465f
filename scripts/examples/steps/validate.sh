#!/bin/sh
# validate.sh RAW_CSV — checks the header and that every row has 5 fields
# and a numeric amount. Read-only, so it is idempotent by nature.
set -eu
file=$1
head -n 1 "$file" | grep -qx 'date,region,city,order_id,amount' || { echo "bad header in $file" >&2; exit 1; }
awk -F, 'NR > 1 && (NF != 5 || $5 !~ /^[0-9]+(\.[0-9]+)?$/) { printf "line %d: bad row: %s\n", NR, $0 > "/dev/stderr"; bad = 1 }
         END { if (bad) exit 1; printf "%d rows valid\n", NR - 1 }' "$file"
