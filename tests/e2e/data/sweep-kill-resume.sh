#!/bin/sh
# Kills a sweep with SIGKILL part-way, tears its last CSV line, resumes it, and checks that every
# configuration has exactly one row in the CSV and in the JSONL, and that the killed sweep left
# no run behind.
#
# Nothing here depends on timing: the second half of the configurations reads its MoE routing
# weights from a named pipe that nobody writes to, so a sweep with --jobs 1 writes exactly the
# first half of the rows and then blocks in the next run until it is killed. The resumed sweep
# finds a regular file at that path.
# Usage: sweep-kill-resume.sh DLSIM
set -e
dlsim=$1
d=$(mktemp -d /tmp/dlsim-sweep-kill-XXXXXX)
trap 'rm -rf "$d"' EXIT
mkfifo "$d/gate"
cat > "$d/spec.json" <<SPEC
{
  "comment": "30 closed-form configurations: 20 valid, 10 invalid (grid 2x2 needs 4 GPUs, tp 2 needs 2)",
  "fixed": {"workload": "resnet18-cifar100", "platform": "thetagpu", "mode": "analytic", "batch": 256},
  "axes": {
    "routing": ["uniform", "file:$d/gate"],
    "gpus": [1, 2, 4, 8, 16],
    "strategy": [{"label": "dp"}, {"label": "grid", "grid": "2x2"}, {"label": "tp", "tp": 2}]
  }
}
SPEC
spec=$d/spec.json
total=$("$dlsim" sweep --list "$spec" | wc -l)
echo "configurations: $total"

"$dlsim" sweep "$spec" --out "$d/s" --jobs 1 >/dev/null 2>&1 &
pid=$!
# header + 15 rows: the sweep is now blocked opening the pipe (bounded wait, for a broken build)
i=0
while [ "$(cat "$d/s.csv" 2>/dev/null | wc -l)" -lt 16 ]; do
  sleep 0.05
  i=$((i + 1))
  if [ $i -gt 6000 ]; then echo "no 15 rows after 5 min"; kill -9 $pid; exit 1; fi
done
kill -9 $pid
wait $pid 2>/dev/null || true
echo "killed after $(($(wc -l < "$d/s.csv") - 1)) rows"
# the blocked run dies with its sweep
i=0
while pgrep -f -- "--routing file:$d/gate" >/dev/null; do
  sleep 0.05
  i=$((i + 1))
  if [ $i -gt 600 ]; then echo "a run outlived its killed sweep"; pkill -9 -f -- "$d/gate"; exit 1; fi
done
echo "no run left behind"

# a row cut short by a crash: resume must drop it
printf '%s' '--workload resnet18-cifar100 --mode ana' >> "$d/s.csv"
rm "$d/gate"
echo '[1, 1]' > "$d/gate"
"$dlsim" sweep "$spec" --out "$d/s" --jobs 2 > "$d/resume.txt" 2> "$d/resume.err"
grep -q 'dropped 1 incomplete' "$d/resume.err" && echo "torn line dropped"
grep -q "15 already done" "$d/resume.txt" && echo "resumed"

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
