#!/bin/sh
# Kills a sweep with SIGKILL part-way, tears its last CSV line, resumes it, and checks that every
# configuration has exactly one row in the CSV and in the JSONL, and that the killed sweep left
# no run behind.
#
# Nothing here depends on timing: the first run of the second half of the configurations (a
# simulation, marked by its --routing file) is stopped with SIGSTOP as soon as it appears, so a
# sweep with --jobs 1 has written exactly the first half of the rows and waits on a run that
# cannot end, until it is killed. (Inputs are read only as regular files: a FIFO no longer
# blocks a run, it is refused.)
# Usage: sweep-kill-resume.sh DLSIM
set -e
dlsim=$1
d=$(mktemp -d /tmp/dlsim-sweep-kill-XXXXXX)
trap 'pkill -9 -f -- "$d/gate" 2>/dev/null || true; rm -rf "$d"' EXIT
echo '[1, 1]' > "$d/gate"
cat > "$d/spec.json" <<SPEC
{
  "comment": "30 configurations: 20 valid, 10 invalid (grid 2x2 needs 4 GPUs, tp 2 needs 2); the second half simulated",
  "fixed": {"workload": "resnet18-cifar100", "platform": "thetagpu", "batch": 256},
  "axes": {
    "half": [{"label": "first", "mode": "analytic", "routing": "uniform"},
             {"label": "second", "mode": "sim", "routing": "file:$d/gate", "iters": 4}],
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
# the second half's first run: stopped where it stands (bounded wait, for a broken build)
i=0
stopped=
while [ -z "$stopped" ]; do
  # the sweep's own child: a run's helpers (mpirun, the simulator) may carry the same options,
  # and which of them pgrep lists first is a matter of timing
  for r in $(pgrep -P "$pid" -f -- "--routing file:$d/gate" || true); do
    kill -STOP "$r" 2>/dev/null && stopped=$r && break
  done
  [ -n "$stopped" ] && break
  sleep 0.02
  i=$((i + 1))
  if [ $i -gt 15000 ]; then echo "no run of the second half after 5 min"; kill -9 $pid; exit 1; fi
done
# where it would write its result, read while it is frozen
out=$(tr '\0' '\n' < "/proc/$stopped/cmdline" | sed -n '/^--out$/{n;p;}')
rows=$(($(wc -l < "$d/s.csv") - 1))
kill -9 $pid
wait $pid 2>/dev/null || true
[ "$rows" -ge 15 ] && [ "$rows" -lt 30 ] && echo "killed part-way"
# the stopped run dies with its sweep: its parent-death signal (SIGTERM) waits, pending, until
# the run is let go on (only SIGKILL ends a stopped process)
kill -CONT "$stopped" 2>/dev/null || true
i=0
while kill -0 "$stopped" 2>/dev/null && [ "$(ps -o stat= -p "$stopped" | cut -c1)" != Z ]; do
  sleep 0.05
  i=$((i + 1))
  if [ $i -gt 600 ]; then echo "a run outlived its killed sweep"; kill -9 "$stopped"; exit 1; fi
done
if pgrep -f -- "--routing file:$d/gate" >/dev/null; then echo "a run outlived its killed sweep"; exit 1; fi
# it died, it did not finish: no result of it
if [ -z "$out" ] || [ -e "$out" ]; then echo "the stopped run finished instead of dying ($out)"; exit 1; fi
echo "no run left behind"

# a row cut short by a crash: resume must drop it
printf '%s' '--workload resnet18-cifar100 --mode ana' >> "$d/s.csv"
"$dlsim" sweep "$spec" --out "$d/s" --jobs 2 > "$d/resume.txt" 2> "$d/resume.err"
grep -q 'dropped 1 incomplete' "$d/resume.err" && echo "torn line dropped"
grep -q "$rows already done" "$d/resume.txt" && echo "resumed"

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
