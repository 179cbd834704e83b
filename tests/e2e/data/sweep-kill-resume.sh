#!/bin/sh
# Kills a sweep with SIGKILL once it has written a few rows, tears its last CSV line, resumes it,
# and checks that every configuration has exactly one row in the CSV and in the JSONL.
# Usage: sweep-kill-resume.sh DLSIM SPEC
set -e
dlsim=$1
spec=$2
d=$(mktemp -d /tmp/dlsim-sweep-kill-XXXXXX)
trap 'rm -rf "$d"' EXIT
total=$("$dlsim" sweep --list "$spec" | wc -l)
echo "configurations: $total"

# one run at a time, 100 ms apart: the whole sweep takes at least 3 s
"$dlsim" sweep "$spec" --out "$d/s" --jobs 1 --throttle-ms 100 >/dev/null 2>&1 &
pid=$!
i=0
while [ "$(cat "$d/s.csv" 2>/dev/null | wc -l)" -lt 4 ]; do
  sleep 0.02
  i=$((i + 1))
  if [ $i -gt 1500 ]; then echo "no rows after 30 s"; kill -9 $pid; exit 1; fi
done
kill -9 $pid
wait $pid 2>/dev/null || true
rows=$(($(wc -l < "$d/s.csv") - 1))
if [ "$rows" -ge 3 ] && [ "$rows" -lt "$total" ]; then echo "killed part-way"; else echo "killed after $rows rows of $total"; fi

# a row cut short by a crash: resume must drop it
printf '%s' '--workload resnet18-cifar100 --mode ana' >> "$d/s.csv"
"$dlsim" sweep "$spec" --out "$d/s" --jobs 2 > "$d/resume.txt" 2> "$d/resume.err"
grep -q 'dropped 1 incomplete' "$d/resume.err" && echo "torn line dropped"
grep -q "already done" "$d/resume.txt" && echo "resumed"

csv_rows=$(($(wc -l < "$d/s.csv") - 1))
csv_keys=$(tail -n +2 "$d/s.csv" | cut -d, -f1 | sort -u | wc -l)
jsonl_rows=$(wc -l < "$d/s.jsonl")
echo "csv rows: $csv_rows, distinct keys: $csv_keys, jsonl rows: $jsonl_rows"
"$dlsim" sweep --list "$spec" | sort > "$d/want"
tail -n +2 "$d/s.csv" | cut -d, -f1 | sort > "$d/got"
cmp -s "$d/want" "$d/got" && echo "keys match the spec"
echo "ok: $(tail -n +2 "$d/s.csv" | cut -d, -f2 | grep -c '^ok$'), invalid: $(tail -n +2 "$d/s.csv" | cut -d, -f2 | grep -c '^invalid$')"

# a third run has nothing left to do
"$dlsim" sweep "$spec" --out "$d/s" --jobs 2 2>/dev/null | sed "s|$d|DIR|g"
