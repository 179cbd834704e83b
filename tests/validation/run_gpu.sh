#!/bin/sh
# run_gpu.sh — everything dlsim measures on a real NVIDIA GPU, in one command, in order of value:
#   1. the CUDA kernels against their CPU twins in every precision (test_kernels_cuda, which fails
#      when no GPU is found: DLSIM_REQUIRE_GPU=1);
#   2. the kernel database of this GPU (kernels/measure_gpu.sh, resumable);
#   3. dlsim's kernels against the framework's (kernels/torch_compare.py; PyTorch with cuDNN and
#      cuBLAS);
#   4. real single-GPU training iterations in PyTorch at the shapes, batches and precisions of the
#      validation table (tests/validation/torch_iter.py);
#   5. dlsim's own real run on the GPU (--mode real --device cuda): weights against the CPU twins,
#      and its times (tests/validation/real_gpu.py; needs mpirun, or DLSIM_MPIRUN naming one);
#   6. what a kernel sum misses, through PyTorch: host time per launch by layer kind, L2 size and
#      rates, kernels cold against warm, GEMM efficiency by shape (tests/validation/torch_micro.py);
#   7. Llama 3: the database's entries at its shapes (measure_gpu.sh's section 5), PyTorch's
#      kernels at the same keys, and real iterations of Llama 3 8B's block with 4 blocks.
#
#   tests/validation/run_gpu.sh OUTDIR [STEPS]  STEPS: any of "test db compare iter real micro
#                                               llama" (default all)
#
# Needs a build with CUDA (build/dlsim, build/libdlsim-cuda.so, build/test_kernels_cuda; DLSIM and
# TESTBIN name others) and python3 with torch for steps 3 and 4. Everything lands in OUTDIR:
# log.txt, <spec-key>.json (a copy of kernels/db/<spec-key>.json), compare.json and compare.md, iter.json
# (one object per training run), real.json (step 5). Predictions
# from the database, and the tables of errors, are made afterwards on any machine:
# tests/validation/predict_gpu.py OUTDIR/iter.json, tests/validation/real_gpu.py --predict
# OUTDIR/real.json.
set -u
OUT=${1:?usage: run_gpu.sh OUTDIR [STEPS]}
STEPS=${2:-test db compare iter real micro llama}
DLSIM=${DLSIM:-build/dlsim}
TESTBIN=${TESTBIN:-build/test_kernels_cuda}
BUDGET_DB=${BUDGET_DB:-330}          # seconds for the database step (it resumes on the next run)
BUDGET_COMPARE=${BUDGET_COMPARE:-100} # seconds for the framework comparison
BUDGET_REAL=${BUDGET_REAL:-300}       # seconds for dlsim's real runs on the GPU
BUDGET_LLAMA=${BUDGET_LLAMA:-180}     # seconds for the Llama kernels (each of dlsim's and PyTorch's)
mkdir -p "$OUT"
LOG=$OUT/log.txt
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG" >&2; }
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }

say "run_gpu.sh: steps '$STEPS' into $OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu \
  --format=csv >>"$LOG" 2>&1 || say "nvidia-smi failed"
# The database kbench measures on this GPU: the one under kernels/db/ measured with the CUDA
# backend (not derived, not the framework's) on a GPU of this name, the newest if there are
# several; "" when there is none (another GPU's database is never taken for this one's).
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
db_now() {
  GPU_NAME="$GPU_NAME" python3 - <<'PY'
import glob, json, os
dbs = []
for f in glob.glob("kernels/db/*.json"):
    with open(f) as fh:
        p = json.load(fh).get("provenance", {})
    if p.get("backend") == "cuda" and not p.get("derived") and \
            p.get("device_full_name") == os.environ["GPU_NAME"]:
        dbs.append((os.path.getmtime(f), f))
print(max(dbs)[1] if dbs else "")
PY
}

if has test; then
  say "1. CUDA kernels against the CPU twins"
  timeout 300 env DLSIM_REQUIRE_GPU=1 "$TESTBIN" >>"$LOG" 2>&1 && say "   passed" ||
    say "   FAILED (see log)"
fi
if has db; then
  say "2. kernel database (budget ${BUDGET_DB} s)"
  timeout "$BUDGET_DB" kernels/measure_gpu.sh >>"$LOG" 2>&1
  st=$?
  DB=$(db_now)
  if [ -n "$DB" ]; then
    say "   status $st; $DB: $(python3 -c "import json,sys;print(len(json.load(open(sys.argv[1]))['entries']),'entries')" "$DB" 2>&1)"
    cp "$DB" "$OUT/"
  else
    say "   status $st; no database of this GPU ($GPU_NAME) was written"
  fi
fi
if has compare; then
  DB=$(db_now)
  if [ -z "$DB" ]; then
    say "3. skipped: no database of this GPU ($GPU_NAME) under kernels/db/ (run step db)"
  else
    say "3. dlsim's kernels against PyTorch's, $DB (budget ${BUDGET_COMPARE} s)"
    timeout $((BUDGET_COMPARE + 30)) python3 kernels/torch_compare.py "$DB" --resume \
      --out "$OUT/compare.json" --md "$OUT/compare.md" --max-seconds "$BUDGET_COMPARE" >>"$LOG" 2>&1
    say "   status $?"
  fi
fi
if has iter; then
  say "4. real training iterations in PyTorch"
  while read -r w b p; do
    say "   $w batch $b $p"
    timeout 120 python3 tests/validation/torch_iter.py --workload "workloads/$w.json" --batch "$b" \
      --precision "$p" --iters 12 --warmup 3 --count-kernels --no-fallback \
      --out "$OUT/iter-$w-$b-$p.json" >>"$LOG" 2>&1 || say "   status $?"
  done <<LIST
resnet18-cifar100 128 bf16
resnet18-cifar100 256 bf16
resnet18-cifar100 128 fp32
resnet18-cifar100 256 fp32
resnet18-cifar100 128 tf32
resnet18-cifar100 256 tf32
resnet50-imagenet 64 bf16
resnet50-imagenet 128 bf16
resnet50-imagenet 64 fp32
resnet50-imagenet 128 fp32
resnet50-imagenet 64 tf32
resnet50-imagenet 128 tf32
gpt-1.7b 4 bf16
LIST
  python3 - "$OUT" <<'PY' || say "   could not merge the results"
import glob, json, os, sys
out = sys.argv[1]
files = sorted(glob.glob(os.path.join(out, "iter-*.json")))
runs = []
for f in files:
    with open(f) as fh:
        runs.append(json.load(fh))
with open(os.path.join(out, "iter.json"), "w") as fh:
    json.dump(runs, fh, indent=1)
for f in files:
    os.remove(f)
PY
fi
if has real; then
  say "5. dlsim --mode real --device cuda (budget ${BUDGET_REAL} s)"
  timeout $((BUDGET_REAL + 60)) python3 tests/validation/real_gpu.py --dlsim "$DLSIM" \
    --out "$OUT/real.json" --budget "$BUDGET_REAL" >>"$LOG" 2>&1
  say "   status $? (0: every weight check passed)"
fi
if has micro; then
  say "6. host launch, L2, warm kernels, GEMM efficiency (PyTorch)"
  timeout 120 python3 tests/validation/torch_micro.py --out "$OUT/micro.json" >>"$LOG" 2>&1
  say "   status $?"
fi
if has llama; then
  DB=$(db_now)
  say "7. Llama 3: dlsim's kernels into ${DB:-this GPU's database} (budget ${BUDGET_LLAMA} s)"
  python3 -c "import json,sys; print('\\n'.join(e['key'] for e in json.load(open(sys.argv[1]))['entries']))" \
    "$DB" >"$OUT/keys-before.txt" 2>/dev/null || : >"$OUT/keys-before.txt"
  timeout "$BUDGET_LLAMA" env MEASURE=llama kernels/measure_gpu.sh $DB >>"$LOG" 2>&1
  say "   status $?"
  DB=$(db_now)
  cp "$DB" "$OUT/" 2>/dev/null
  # the entries this step added, as a database of their own, for PyTorch's times at their keys
  python3 - "$DB" "$OUT/keys-before.txt" "$OUT/llama-new.json" <<'PY' || say "   no new entries"
import json, sys
db = json.load(open(sys.argv[1]))
old = set(open(sys.argv[2]).read().split("\n"))
db["entries"] = [e for e in db["entries"] if e["key"] not in old]
json.dump(db, open(sys.argv[3], "w"), indent=1)
print(len(db["entries"]), "new entries", file=sys.stderr)
PY
  say "   PyTorch's kernels at the new keys (budget ${BUDGET_LLAMA} s)"
  timeout $((BUDGET_LLAMA + 30)) python3 kernels/torch_compare.py "$OUT/llama-new.json" \
    --out "$OUT/compare-llama.json" --max-seconds "$BUDGET_LLAMA" >>"$LOG" 2>&1
  say "   status $?"
  for b in 1 2; do
    say "   llama3-8b-4l batch $b bf16"
    timeout 120 python3 tests/validation/torch_iter.py --workload tests/validation/llama3-8b-4l.json \
      --batch "$b" --precision bf16 --iters 12 --warmup 3 --count-kernels --no-fallback \
      --out "$OUT/iter-llama-$b.json" >>"$LOG" 2>&1 || say "   status $?"
  done
  rm -f "$OUT/keys-before.txt"
fi
say "done"
