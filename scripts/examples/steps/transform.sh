#!/bin/sh
# transform.sh RAW_CSV OUT_CSV — total amount and order count per city.
# Writes a temporary file and renames it: rerunning it overwrites the result.
set -eu
in=$1 out=$2
awk -F, 'NR > 1 { sum[$3] += $5; n[$3]++ }
         END { print "city,orders,total"; for (c in sum) printf "%s,%d,%.2f\n", c, n[c], sum[c] }' "$in" \
  | { read -r header; echo "$header"; sort; } > "$out.tmp"
sleep 0.3
mv "$out.tmp" "$out"
echo "wrote $(($(wc -l < "$out") - 1)) cities to $out"
