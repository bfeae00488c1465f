#!/bin/sh
# fetch_raw.sh ARTIFACTS_DIR DATE REGION ROWS
# Stands in for a download: writes ROWS rows of sales for DATE to raw.csv.
# The overwrite pattern: write a temporary file, then rename it into place,
# so a crash never leaves a half-written raw.csv behind.
set -eu
dir=$1 date=$2 region=$3 rows=$4
mkdir -p "$dir"
awk -v date="$date" -v region="$region" -v rows="$rows" 'BEGIN {
  split("berlin paris madrid rome lisbon vienna", cities, " ")
  print "date,region,city,order_id,amount"
  seed = 0
  for (i = 1; i <= length(date); i++) seed = seed * 31 + index("0123456789-", substr(date, i, 1))
  srand(seed)
  for (i = 1; i <= rows; i++) {
    printf "%s,%s,%s,%d,%.2f\n", date, region, cities[int(rand() * 6) + 1], i, rand() * 100
  }
}' > "$dir/raw.csv.tmp"
sleep 0.3 # a real download takes a while: time enough to try kill -9
mv "$dir/raw.csv.tmp" "$dir/raw.csv"
echo "fetched $rows rows for $date ($region)"
