#!/bin/sh
# measure_gpu.sh — measures this machine's GPU into its kernel database: every kernel that the main
# job, the studies of analysis/studies/ and the single-GPU validation (tests/validation/) run, in
# the precisions they run in, plus each layer at batch 1, 4, 16 and 64 for interpolation.
#
#   kernels/measure_gpu.sh [DB]       (default: kernels/db/<spec key of this GPU>.json)
#   KBENCH_LIST=1 kernels/measure_gpu.sh   only counts the kernels (no GPU needed)
#   MEASURE=llama kernels/measure_gpu.sh   only section 5 (Llama 3)
#
# Configurations run in order of importance. Each is one `dlsim kbench --resume` into the same
# file, which is written as it goes: a run that is stopped loses at most the last 10 s, and
# running the script again measures only what is missing. A configuration that fails (a shape that
# does not fit, a kernel the GPU refuses) is reported and skipped, so it cannot keep the ones after
# it from being measured; the script then exits 1.
set -eu
DLSIM=${DLSIM:-build/dlsim}
DB=${1:-}
if [ -n "${KBENCH_LIST:-}" ]; then
  kb() { "$DLSIM" kbench --device cpu --list "$@" 2>&1 >/dev/null | sed "s|^|$* : |"; }
else
  kb() {
    echo "== kbench $*" >&2
    "$DLSIM" kbench --device cuda --resume ${DB:+--out "$DB"} "$@" ||
      { echo "measure_gpu.sh: FAILED (status $?): kbench $*" >&2; FAILS=$((FAILS + 1)); }
  }
fi
FAILS=0
MEASURE=${MEASURE:-all}
case $MEASURE in all | llama) ;; *) echo "measure_gpu.sh: MEASURE=all or llama" >&2; exit 2 ;; esac

if [ "$MEASURE" = all ]; then
# 1. The main job (fp32): ResNet-18/CIFAR-100, data parallel at 128 per GPU, GPipe micro-batches
#    of 16·G samples on G = 2..8 GPUs, tp 2 for the scaling study.
kb --workload resnet18-cifar100 --gpus 1 --batch 128 --precision fp32 --grid-shapes
for b in 32 64 96 256; do kb --workload resnet18-cifar100 --gpus 1 --batch $b --precision fp32; done
kb --workload resnet18-cifar100 --gpus 2 --tp 2 --batch 256 --precision fp32
# 2. Single-GPU validation (tests/validation/): ResNet-18 and ResNet-50 at ImageNet shape in fp32
#    and bf16, the GPT in bf16.
kb --workload resnet50-imagenet --gpus 1 --batch 64 --precision fp32 --grid-shapes
kb --workload resnet50-imagenet --gpus 1 --batch 64 --precision bf16 --grid-shapes
for b in 4 1 2 8; do kb --workload gpt-1.7b --gpus 1 --batch $b --precision bf16; done
kb --workload resnet18-cifar100 --gpus 1 --batch 128 --precision bf16
#    and the validation's second batch size and tf32 (tests/validation/run_gpu.sh's iterations)
for p in bf16 tf32; do kb --workload resnet18-cifar100 --gpus 1 --batch 256 --precision $p; done
kb --workload resnet18-cifar100 --gpus 1 --batch 128 --precision tf32
kb --workload resnet50-imagenet --gpus 1 --batch 64 --precision tf32
for p in fp32 bf16 tf32; do kb --workload resnet50-imagenet --gpus 1 --batch 128 --precision $p; done
#    ResNet-50 at 256 images per GPU in tf32 and bf16: the A100 databases derive their times
#    from these
for p in tf32 bf16; do kb --workload resnet50-imagenet --gpus 1 --batch 256 --precision $p; done
# 3. The studies: 3-D GPT (fp16, recomputation, 1F1B), MoE skew (bf16), grids of AlexNet and
#    VGG-16 (fp32; fully connected layers on the grid), ResNet-50 at 32 per GPU (scale runs).
for w in gpt-1.7b gpt-18b; do
  kb --workload $w --gpus 64 --tp 8 --pp 1 --microbatches 8 --batch 768 --precision fp16 --recompute --schedule 1f1b
  kb --workload $w --gpus 128 --tp 8 --pp 2 --microbatches 16 --batch 768 --precision fp16 --recompute --schedule 1f1b
  kb --workload $w --gpus 64 --tp 4 --pp 4 --microbatches 16 --batch 768 --precision fp16 --recompute --schedule 1f1b
done
kb --workload mixtral-8x1b --gpus 64 --tp 2 --ep 8 --batch 256 --precision bf16
for b in 1 4; do kb --workload mixtral-8x1b --gpus 1 --batch $b --precision bf16; done
kb --workload resnet50-imagenet --gpus 1 --batch 32 --precision fp32
for w in alexnet-imagenet vgg16-imagenet; do
  kb --workload $w --gpus 1 --batch 128 --precision fp32
  for g in 1x8 2x4 4x2 8x1; do kb --workload $w --gpus 8 --grid $g --grid-layers fc --batch 3072 --precision fp32; done
done
# 4. The other precisions.
for p in tf32 fp16; do kb --workload resnet18-cifar100 --gpus 1 --batch 128 --precision $p; done
for p in tf32 fp16; do kb --workload resnet50-imagenet --gpus 1 --batch 64 --precision $p; done
for p in fp32 tf32 fp16; do kb --workload gpt-1.7b --gpus 1 --batch 4 --precision $p; done
for p in tf32 fp16 bf16; do
  kb --workload vgg16-imagenet --gpus 1 --batch 128 --precision $p
  kb --workload alexnet-imagenet --gpus 1 --batch 128 --precision $p
done
for g in 1 4 16 64; do kb --workload alexnet-imagenet --gpus 1 --batch $g --precision fp32; done
for g in 1 4 16 64; do kb --workload vgg16-imagenet --gpus 1 --batch $g --precision fp32; done
fi
# 5. Llama 3 in bf16 at sequence 8,192, one sequence per micro-batch (as the studies and the
#    search run them): the studies' shapes first (8B at tp 4, 70B and 405B at tp 8), then the
#    4-block 8B of the single-GPU validation at 1 and 2 sequences, then Megatron's sequence
#    parallelism (norms and residuals on 1/tp of the sequence) and the other tp degrees.
kb --workload llama3-8b --gpus 4 --tp 4 --batch 1 --precision bf16
kb --workload llama3-70b --gpus 8 --tp 8 --batch 1 --precision bf16
kb --workload llama3-405b --gpus 8 --tp 8 --batch 1 --precision bf16
for b in 1 2; do
  kb --workload tests/validation/llama3-8b-4l.json --gpus 1 --batch $b --precision bf16
done
kb --workload llama3-8b --gpus 8 --tp 8 --batch 1 --precision bf16
for w in llama3-8b llama3-70b llama3-405b; do
  kb --workload $w --gpus 8 --tp 8 --batch 1 --precision bf16 --sequence-parallel
done
kb --workload llama3-8b --gpus 4 --tp 4 --batch 1 --precision bf16 --sequence-parallel
kb --workload llama3-8b --gpus 2 --tp 2 --batch 1 --precision bf16
kb --workload llama3-8b --gpus 2 --tp 2 --batch 1 --precision bf16 --sequence-parallel
#    the layouts `dlsim search` weighs on one DGX node: 2 and 4 sequences per micro-batch (one
#    GPU holds the 8B's attention at 2), the 70B and 405B at 2; 32K-token sequences at tp 8;
#    DeepSeekMoE's dense layers
for tp in 1 2 4 8; do
  for b in 2 4; do
    [ $tp -eq 1 ] && [ $b -eq 4 ] && continue
    kb --workload llama3-8b --gpus $tp --tp $tp --batch $b --precision bf16
    [ $tp -gt 1 ] && kb --workload llama3-8b --gpus $tp --tp $tp --batch $b --precision bf16 --sequence-parallel
  done
done
for w in llama3-70b llama3-405b; do kb --workload $w --gpus 8 --tp 8 --batch 2 --precision bf16; done
kb --workload llama3-8b --seq-len 32768 --gpus 8 --tp 8 --batch 1 --precision bf16
kb --workload deepseekmoe-16b --gpus 8 --ep 8 --batch 8 --precision bf16
if [ "$FAILS" -gt 0 ]; then
  echo "measure_gpu.sh: $FAILS configuration(s) failed; see FAILED above" >&2
  exit 1
fi
