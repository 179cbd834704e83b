#!/usr/bin/env python3
"""Numerics of the real executor: every parallel strategy computes the serial run's training.

Usage: check_real.py DLSIM   (run from anywhere; DLSIM_DATA_DIR points at the repository)

Each case runs `dlsim run --mode real` (mpirun, oversubscribed) for 2 iterations and compares the
per-iteration loss and every parameter after the last step (--dump-weights, serial layout) with
the serial run (1 rank, no micro-batches) of the same workload and batch.

Why they must agree: every strategy starts from the same weights (seeded by layer and element)
and sees the same samples (seeded by global sample index); data parallelism sums the ranks'
gradients of their local mean losses and divides by dp, micro-batching sums the micro-batch
gradients and divides by m, so the update is the serial one of the mean loss over the batch.
The only difference is the order of float32 additions (sums split across ranks and micro-
batches, reduced by the ring all-reduce, and OpenBLAS blocking for a different number of rows).

Tolerances (measured margins in brackets):
  loss       relative 1e-6: a mean of 16-512 float32 terms re-associated differs by a few ulps
             (2^-24 = 6e-8); observed <= 2e-8 [50x].
  weights    SGD with momentum: |w - w_serial| <= 1e-5 * max|w_serial| of the layer, for every
             element. A re-associated gradient differs by a few ulps of its largest terms, and
             an SGD step moves the weight by lr * g, so after 2 steps the weights differ by
             about an ulp of the layer's scale (2^-24 * max|w| = 6e-8 relative); observed
             <= 3e-7 of the layer scale [30x]. A missing 1/dp, a lost bucket or a wrong
             micro-batch slice moves weights by about lr * |g| (1e-4 .. 1e-3 of the scale).
  weights    Adam (gpt-tiny): Adam divides by sqrt(v) + eps, so a gradient element near zero
             whose float sum differs by d moves its weight by up to lr * d / eps (lr / eps =
             1e5): a handful of such elements differ by up to ~3% of one step. So: every
             element within 0.1 * lr (a tenth of one Adam step), and 99.5% within the SGD
             bound above (observed 99.9%). gpt-tiny-sgd (the same model trained with SGD)
             carries the tight check for the transformer.
Tensor, domain and expert parallelism change only where sums are cut, so the same tolerances apply:
  grid Pr x Pc   every conv/linear keeps rows [tp_i*d/Pr, ...) (uneven for 10 outputs over 4),
                 its output is all-gathered and the partial input gradients all-reduced over Pr:
                 forward values are bit-identical, input gradients re-associated over Pr;
                 --grid-layers fc runs the convolutions batch-parallel over all P and all-
                 gathers their output over Pr before the first linear (Gholami et al. Eq. 6);
  domain         --domain conv: rank tp_i of Pr holds rows of every image before the first
                 linear; convolution and pooling read their neighbours' halo rows (forward values
                 bit-identical), input gradients come from the neighbours' output-gradient rows,
                 batch norm sums Σx, Σx² and its backward sums over Pr (mean and variance from
                 E[x²] − μ²: a few ulps), weight gradients are summed over all P;
  Megatron tp    the parallel cross-entropy adds exp terms per vocabulary slice; the row
                 linears' partial outputs are summed by the all-reduce;
  context (cp)   every layer on the rank's share of each sequence, the loss a mean over it;
                 ring attention merges the blocks' outputs by their log-sum-exp (a few ulps)
                 and sums each chunk's K/V gradients over the ring; Ulysses' all-to-alls give
                 attention whole sequences of the rank's heads (forward values bit-identical);
                 the gradients are summed over dp x cp;
  experts (ep)   with dp = ep and one micro-batch the EP group is the whole batch, so each
                 token meets the serial run's capacity decisions (capacity factor 1.0 drops
                 tokens in tests/real/moe-tiny.json); with dp 4 and ep 2 each EP group decides
                 on its own tokens, so that case runs with --capacity-factor 0 (nothing dropped),
                 and dp 2 without ep (capacity per rank) is checked to DIFFER.
Every tp/ep case also checks that the result has tp/ep collective rows that moved bytes.
Batch norm: each rank (and each micro-batch) normalises with its own batch's statistics, as
PyTorch DDP without SyncBatchNorm, so cnn-small equals the serial run only with one micro-batch
per stage and dp 1 (pipeline, m = 1: checked); with dp 2 the test checks that it DIFFERS, which
also shows that the comparison can fail. The BN-free tests/real/cnn-nobn.json takes every
strategy; on the grid batch norm sees B/Pc samples, so cnn-small is checked on the 4x1 grid.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import weights
from weights import ADAM_LR

DLSIM = sys.argv[1]
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(SRC, "tests", "real")
ITERS = 2
BATCH = 16
failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures += 1


def run(tmp, tag, args, expect_rc=0, guarded=False):
    out = os.path.join(tmp, tag + ".json")
    w = os.path.join(tmp, tag + ".bin")
    cmd = [DLSIM, "run", "--mode", "real", "--iters", str(ITERS), "--batch", str(BATCH),
           "--out", out, "--dump-weights", w] + args
    env = dict(os.environ, DLSIM_REAL_GUARDED="1") if guarded else None
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != expect_rc:
        print(p.stderr)
        return None, None, p
    if expect_rc:
        return None, None, p
    with open(out) as f:
        res = json.load(f)
    return res, weights.read(w), p


def compare(tag, ref, got, adam):
    (rres, (rhead, rw)), (res, (head, w)) = ref, got
    check(head == rhead and len(w) == len(rw), f"{tag}: same parameter layout")
    if head != rhead or len(w) != len(rw):
        return
    rl, gl = rres["loss"], res["loss"]
    worst = max(abs(a - b) / abs(a) for a, b in zip(rl, gl))
    check(len(gl) == ITERS and worst <= 1e-6, f"{tag}: loss {gl} vs serial {rl} (rel {worst:.1e} <= 1e-6)")
    bad, outside, worst_rel = [], 0, 0.0
    for name, scale, devs in weights.layer_deviations((rhead, rw), (head, w)):
        for d in devs:
            worst_rel = max(worst_rel, d / scale)
            if d > 1e-5 * scale:
                outside += 1
                if not adam or d > 0.1 * ADAM_LR:
                    bad.append(name)
                    break
    total = len(w)
    if adam:
        check(not bad and outside <= 0.005 * total,
              f"{tag}: weights: {outside}/{total} outside 1e-5 of the layer scale (<= 0.5%), "
              f"all within 0.1 lr (worst {worst_rel:.1e} of the scale){' BAD ' + str(bad) if bad else ''}")
    else:
        check(not bad, f"{tag}: every weight within 1e-5 of its layer's scale (worst {worst_rel:.1e})"
              f"{' BAD in ' + str(bad) if bad else ''}")


def max_dev(ref, got):
    """Largest |w - w_serial| over all elements, relative to the layer's max |w_serial|."""
    return max((d / scale for _, scale, devs in weights.layer_deviations(ref, got) for d in devs),
               default=0.0)


def main():
    t0 = time.time()
    cnn_nobn = os.path.join(HERE, "cnn-nobn.json")
    gpt_sgd = os.path.join(HERE, "gpt-tiny-sgd.json")
    moe_tiny = os.path.join(HERE, "moe-tiny.json")
    llama_sgd = os.path.join(HERE, "llama-tiny-sgd.json")
    resnet_nobn = os.path.join(HERE, "resnet-nobn.json")
    # (workload, adam, [(tag, options)])
    cases = [
        ("mlp-small", False, [
            ("dp2", ["--gpus", "2"]),
            ("dp4", ["--gpus", "4"]),
            ("m4 (gradient accumulation)", ["--gpus", "1", "--microbatches", "4"]),
            ("pp2 gpipe m4", ["--gpus", "2", "--pp", "2", "--microbatches", "4"]),
            ("pp4 1f1b m8", ["--gpus", "4", "--pp", "4", "--microbatches", "8", "--schedule", "1f1b"]),
            ("pp2 dp2 1f1b m4", ["--gpus", "4", "--pp", "2", "--dp", "2", "--microbatches", "4",
                                 "--schedule", "1f1b"]),
        ]),
        (cnn_nobn, False, [
            ("dp2", ["--gpus", "2"]),
            ("dp4", ["--gpus", "4"]),
            ("pp2 gpipe m4", ["--gpus", "2", "--pp", "2", "--microbatches", "4"]),
            ("pp2 dp2 1f1b m8", ["--gpus", "4", "--pp", "2", "--dp", "2", "--microbatches", "8",
                                 "--schedule", "1f1b"]),
        ]),
        ("cnn-small", False, [
            ("pp2 m1 (batch norm sees the whole batch)", ["--gpus", "2", "--pp", "2",
                                                          "--microbatches", "1"]),
        ]),
        (gpt_sgd, False, [
            ("dp2", ["--gpus", "2"]),
            ("dp4", ["--gpus", "4"]),
            ("pp2 1f1b m4", ["--gpus", "2", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b"]),
            ("pp4 gpipe m8 (tied embedding across stages)", ["--gpus", "4", "--pp", "4",
                                                             "--microbatches", "8"]),
            ("pp2 dp2 gpipe m4", ["--gpus", "4", "--pp", "2", "--dp", "2", "--microbatches", "4"]),
        ]),
        # Gholami's Pr x Pc grid: conv/linear rows split over Pr (uneven: fc 10 over 4), outputs
        # all-gathered, partial input gradients all-reduced over Pr, weight gradients over Pc
        ("mlp-small", False, [
            ("grid 2x2", ["--gpus", "4", "--grid", "2x2"]),
            ("grid 4x1", ["--gpus", "4", "--grid", "4x1"]),
            ("grid 1x4", ["--gpus", "4", "--grid", "1x4"]),
        ]),
        (cnn_nobn, False, [
            ("grid 2x2", ["--gpus", "4", "--grid", "2x2"]),
            ("grid 4x1", ["--gpus", "4", "--grid", "4x1"]),
            ("grid 1x4", ["--gpus", "4", "--grid", "1x4"]),
            ("grid 2x2 --grid-layers fc (convs batch-parallel over 4, then redistributed)",
             ["--gpus", "4", "--grid", "2x2", "--grid-layers", "fc"]),
            ("grid 4x1 --grid-layers fc", ["--gpus", "4", "--grid", "4x1", "--grid-layers", "fc"]),
            ("grid 2x2, full recomputation (the output blocks gathered again)",
             ["--gpus", "4", "--grid", "2x2", "--recompute"]),
        ]),
        ("cnn-small", False, [
            ("grid 4x1 (batch norm on channel slices sees the whole batch)",
             ["--gpus", "4", "--grid", "4x1"]),
        ]),
        # domain parallelism: image rows split over Pr, halo rows exchanged by the windowed layers,
        # weights replicated (gradients over all P), rows all-gathered before the flatten; 3x1
        # splits 32 rows 10/11/11 and pool1's 16 output rows 5/5/6 (slabs that do not line up)
        (cnn_nobn, False, [
            ("domain 4x1", ["--gpus", "4", "--grid", "4x1", "--domain", "conv"]),
            ("domain 2x2", ["--gpus", "4", "--grid", "2x2", "--domain", "conv"]),
            ("domain 3x1 (uneven rows)", ["--gpus", "3", "--grid", "3x1", "--domain", "conv"]),
            ("domain 1x4", ["--gpus", "4", "--grid", "1x4", "--domain", "conv"]),
        ]),
        ("cnn-small", False, [
            ("domain 4x1 (batch norm sums its statistics over the rows' group)",
             ["--gpus", "4", "--grid", "4x1", "--domain", "conv"]),
        ]),
        # Megatron: QKV split by heads, vocabulary-parallel embedding and cross-entropy
        (gpt_sgd, False, [
            ("megatron tp2", ["--gpus", "2", "--tp", "2", "--tp-style", "megatron"]),
            ("megatron tp4", ["--gpus", "4", "--tp", "4", "--tp-style", "megatron"]),
            ("megatron tp2 dp2", ["--gpus", "4", "--tp", "2", "--dp", "2", "--tp-style", "megatron"]),
            ("megatron tp2 pp2 1f1b m2", ["--gpus", "4", "--tp", "2", "--pp", "2", "--tp-style",
                                          "megatron", "--microbatches", "2", "--schedule", "1f1b"]),
            ("megatron tp2, selective recomputation (attention's forward again in backward)",
             ["--gpus", "2", "--tp", "2", "--tp-style", "megatron", "--recompute", "selective"]),
            # sequence parallelism: norms, residuals and the embedding's output on 1/tp of the
            # sequence; all-gathers and reduce-scatters along it; the column linears' gathered
            # input NaN after their forward, so that the backward's regather must bring it
            ("megatron tp2 sp", ["--gpus", "2", "--tp", "2", "--tp-style", "megatron",
                                 "--sequence-parallel"]),
            ("megatron tp2 pp2 1f1b m2 sp, full recomputation",
             ["--gpus", "4", "--tp", "2", "--pp", "2", "--tp-style", "megatron", "--microbatches",
              "2", "--schedule", "1f1b", "--sequence-parallel", "--recompute"]),
            # full: every layer's forward again, its output NaN first, its tp sums run again
            ("megatron tp2 pp2 1f1b m2, full recomputation",
             ["--gpus", "4", "--tp", "2", "--pp", "2", "--tp-style", "megatron", "--microbatches",
              "2", "--schedule", "1f1b", "--recompute", "full"]),
        ]),
        # experts over dp = ep ranks: capacity decided over the EP group's tokens = the batch
        (moe_tiny, False, [
            ("ep2 (capacity 1.0 drops tokens)", ["--gpus", "2", "--ep", "2"]),
            ("ep4", ["--gpus", "4", "--ep", "4"]),
        ]),
        # dp 4, ep 2: two EP groups decide capacity on their own tokens, so the serial run
        # agrees only when nothing is dropped (--capacity-factor 0: unlimited); expert
        # gradients are all-reduced over expert_dp
        (moe_tiny, False, [
            ("dp4 ep2, no capacity limit", ["--gpus", "4", "--ep", "2"]),
        ], ["--capacity-factor", "0"]),
        # Llama-style blocks: RMSNorm, grouped QKV (4 key/value heads for 8 query heads) with
        # rotary embedding, flash-style attention, interleaved SwiGLU; tp keeps whole query groups
        (llama_sgd, False, [
            ("dp2", ["--gpus", "2"]),
            ("megatron tp2", ["--gpus", "2", "--tp", "2", "--tp-style", "megatron"]),
            ("megatron tp4 (one key/value head per rank)", ["--gpus", "4", "--tp", "4",
                                                           "--tp-style", "megatron"]),
            ("megatron tp2 dp2", ["--gpus", "4", "--tp", "2", "--dp", "2", "--tp-style", "megatron"]),
            ("pp2 1f1b m4", ["--gpus", "2", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b"]),
            ("megatron tp2, full recomputation", ["--gpus", "2", "--tp", "2", "--tp-style",
                                                  "megatron", "--recompute"]),
            ("megatron tp2 dp2 sp, selective recomputation",
             ["--gpus", "4", "--tp", "2", "--dp", "2", "--tp-style", "megatron",
              "--sequence-parallel", "--recompute", "selective"]),
        ]),
        # interleaved 1F1B: V model chunks per rank (virtual stage j on pipeline rank j mod pp),
        # each with its own stage boundaries; the tied embedding and output layer on two ranks
        (gpt_sgd, False, [
            ("pp2 interleaved V2 m4", ["--gpus", "2", "--pp", "2", "--schedule", "interleaved",
                                       "--virtual-stages", "2", "--microbatches", "4"]),
            ("pp2 dp2 interleaved V3 m4", ["--gpus", "4", "--pp", "2", "--dp", "2", "--schedule",
                                           "interleaved", "--virtual-stages", "3",
                                           "--microbatches", "4"]),
        ]),
        (llama_sgd, False, [
            # the embedding alone on virtual stage 0: its output gradient comes from the next
            ("megatron tp2 pp2 sp interleaved V2 m2, full recomputation",
             ["--gpus", "4", "--tp", "2", "--pp", "2", "--tp-style", "megatron",
              "--sequence-parallel", "--schedule", "interleaved", "--virtual-stages", "2",
              "--microbatches", "2", "--recompute"]),
            ("pp2 dp2 zero1 interleaved V2 m4", ["--gpus", "4", "--pp", "2", "--dp", "2", "--zero",
                                                 "1", "--schedule", "interleaved",
                                                 "--virtual-stages", "2", "--microbatches", "4"]),
        ]),
        # context parallelism: every layer on the rank's share of each sequence (its tokens,
        # labels and rotary angles at their places in the sequence), the weights' gradients
        # summed over dp x cp and the loss over the ranks' shares. Ring: two mirrored chunks per
        # rank, one attention block per step merged by log-sum-exp, K/V passed on; backward
        # passes K/V again and their gradients one message behind, each rank adding its share,
        # home after the last step
        (llama_sgd, False, [
            ("ring cp2", ["--gpus", "2", "--cp", "2"]),
            ("ring cp4 (K/V gradients three hops from home)", ["--gpus", "4", "--cp", "4"]),
            ("megatron tp2 sp, ring cp2", ["--gpus", "4", "--tp", "2", "--tp-style", "megatron",
                                           "--sequence-parallel", "--cp", "2"]),
            ("ring cp2 dp2 m2, selective recomputation (the ring again)",
             ["--gpus", "4", "--cp", "2", "--dp", "2", "--microbatches", "2", "--recompute",
              "selective"]),
            ("ring cp4 zero3 m2", ["--gpus", "4", "--cp", "4", "--zero", "3", "--microbatches",
                                   "2"]),
        ]),
        (gpt_sgd, False, [
            ("ring cp2 (packed heads, learned positions)", ["--gpus", "2", "--cp", "2"]),
            ("ring cp2 pp2 1f1b m2, full recomputation",
             ["--gpus", "4", "--cp", "2", "--pp", "2", "--microbatches", "2", "--schedule", "1f1b",
              "--recompute"]),
        ]),
        # Ulysses: an all-to-all over cp before attention (positions -> heads) and one after
        (llama_sgd, False, [
            ("ulysses cp2", ["--gpus", "2", "--cp", "2", "--cp-style", "ulysses"]),
            ("ulysses cp4 (one key/value head per rank)", ["--gpus", "4", "--cp", "4",
                                                           "--cp-style", "ulysses"]),
            ("megatron tp2 sp, ulysses cp2", ["--gpus", "4", "--tp", "2", "--tp-style", "megatron",
                                              "--sequence-parallel", "--cp", "2", "--cp-style",
                                              "ulysses"]),
            ("ulysses cp2 dp2 m2, selective recomputation (the all-to-alls again)",
             ["--gpus", "4", "--cp", "2", "--dp", "2", "--microbatches", "2", "--cp-style",
              "ulysses", "--recompute", "selective"]),
        ]),
        (gpt_sgd, False, [
            ("ulysses cp2 (packed heads, learned positions)", ["--gpus", "2", "--cp", "2",
                                                               "--cp-style", "ulysses"]),
            ("ulysses cp2 pp2 1f1b m2, full recomputation",
             ["--gpus", "4", "--cp", "2", "--pp", "2", "--microbatches", "2", "--schedule", "1f1b",
              "--cp-style", "ulysses", "--recompute"]),
            ("ulysses cp2 dp2 zero3 m2", ["--gpus", "4", "--cp", "2", "--dp", "2", "--zero", "3",
                                          "--microbatches", "2", "--cp-style", "ulysses"]),
        ]),
        # --seq-len: a longer sequence than the workload's (the learned position table grows)
        (gpt_sgd, False, [
            ("megatron tp2 pp2 1f1b m2", ["--gpus", "4", "--tp", "2", "--pp", "2", "--tp-style",
                                          "megatron", "--microbatches", "2", "--schedule", "1f1b"]),
        ], ["--seq-len", "64"]),
        # sharded data parallelism: each bucket or block reduce-scattered (in every micro-batch for
        # ZeRO 2, 3 and FSDP), the step on the rank's shard only, the other parameters NaN until
        # gathered, so that a gather the plan leaves out shows
        (gpt_sgd, False, [
            ("zero1 dp4 (distributed optimizer)", ["--gpus", "4", "--zero", "1"]),
            ("zero2 dp4 m2", ["--gpus", "4", "--zero", "2", "--microbatches", "2"]),
            ("zero3 dp4 m2", ["--gpus", "4", "--zero", "3", "--microbatches", "2"]),
            ("fsdp full dp4", ["--gpus", "4", "--fsdp", "full"]),
            ("fsdp grad-op dp2 m2", ["--gpus", "2", "--fsdp", "grad-op", "--microbatches", "2"]),
            ("fsdp hybrid, shards of 2 in dp4, m2", ["--gpus", "4", "--fsdp", "hybrid",
                                                     "--fsdp-shard-size", "2", "--microbatches", "2"]),
            ("megatron tp2 dp2 zero3", ["--gpus", "4", "--tp", "2", "--tp-style", "megatron",
                                        "--zero", "3"]),
        ]),
        # a residual CNN whose layers outside the blocks (stem, head) are apart: FSDP's root unit
        (resnet_nobn, False, [
            ("fsdp full dp4 m2 (the root unit: stem and head)", ["--gpus", "4", "--fsdp", "full",
                                                                "--microbatches", "2"]),
        ]),
        (llama_sgd, False, [
            ("megatron tp2 dp2 fsdp full m2", ["--gpus", "4", "--tp", "2", "--tp-style", "megatron",
                                               "--fsdp", "full", "--microbatches", "2"]),
            ("pp2 dp2 zero1 1f1b m4", ["--gpus", "4", "--pp", "2", "--zero", "1", "--microbatches",
                                       "4", "--schedule", "1f1b"]),
        ]),
        ("llama-tiny", True, [
            ("megatron tp2 pp2 1f1b m2", ["--gpus", "4", "--tp", "2", "--pp", "2", "--tp-style",
                                          "megatron", "--microbatches", "2", "--schedule", "1f1b"]),
        ]),
        ("gpt-tiny", True, [
            ("dp2", ["--gpus", "2"]),
            ("zero3 dp2 (Adam's moments sharded)", ["--gpus", "2", "--zero", "3"]),
            ("pp2 dp2 1f1b m8", ["--gpus", "4", "--pp", "2", "--dp", "2", "--microbatches", "8",
                                 "--schedule", "1f1b"]),
        ]),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        serial = {}
        for case in cases:
            wl, adam, runs = case[:3]
            extra = case[3] if len(case) > 3 else []
            name = os.path.basename(wl).replace(".json", "") + "".join(extra)
            if name not in serial:
                serial[name] = run(tmp, name + "-serial", ["--workload", wl, "--gpus", "1"] + extra)
            ref_res, ref_w, p = serial[name]
            check(ref_res is not None, f"{name}: serial run")
            if ref_res is None:
                continue
            for i, (tag, opts) in enumerate(runs):
                res, w, p = run(tmp, f"{name}-{tag.split()[0]}{i}", ["--workload", wl] + opts + extra)
                if res is not None and any(o in opts for o in ("--grid", "--tp", "--ep")):
                    split = [c for c in res["collectives"] if c["group"] in ("tp", "ep")]
                    want = not any(g in opts for g in ("1x4",))
                    check(bool(split) == want and all(c["wire_bytes"] > 0 for c in split),
                          f"{name} {tag}: {len(split)} tp/ep collective rows with wire bytes")
                if res is not None and "--cp" in opts:
                    rows = [c for c in res["collectives"] if c["group"] == "cp"]
                    check(bool(rows) and all(c["wire_bytes"] > 0 for c in rows),
                          f"{name} {tag}: {len(rows)} cp rows with wire bytes")
                if res is not None and any(o in opts for o in ("--zero", "--fsdp")):
                    rows = {(c["op"], c["purpose"]): c["wire_bytes"] for c in res["collectives"]}
                    check(rows.get(("reducescatter", "grad_sync"), 0) > 0 and
                          rows.get(("allgather", "param_allgather"), 0) > 0,
                          f"{name} {tag}: reduce-scatter and parameter gather rows with wire bytes")
                check(res is not None, f"{name} {tag}: run")
                if res is not None:
                    compare(f"{name} {tag}", (ref_res, ref_w), (res, w), adam)

        # batch norm under data parallelism is a different function of the batch
        ref_res, ref_w, _ = run(tmp, "bn-serial", ["--workload", "cnn-small", "--gpus", "1"])
        res, w, _ = run(tmp, "bn-dp2", ["--workload", "cnn-small", "--gpus", "2"])
        if ref_res and res:
            d = abs(ref_res["loss"][0] - res["loss"][0]) / ref_res["loss"][0]
            dev = max_dev(ref_w, w)
            check(d > 1e-6 and dev > 100 * 1e-5,
                  f"cnn-small dp2: local batch-norm statistics change the loss (rel {d:.1e} > "
                  f"1e-6) and the weights ({dev:.1e} of a layer's scale > 100x the tolerance)")
        else:
            check(False, "cnn-small dp2 runs")

        # the result and the trace of a parallel run
        trace = os.path.join(tmp, "trace.json")
        res, _, _ = run(tmp, "timed", ["--workload", "mlp-small", "--gpus", "2", "--trace", trace])
        ok = res is not None
        if ok:
            bd = res["breakdown_s"]
            parts = bd["compute"] + bd["exposed_comm"] + bd["bubble"] + bd["idle"]
            ok = res["mode"] == "real" and res["iteration_time_s"] > 0 and \
                abs(parts - res["iteration_time_s"]) <= 0.01 * res["iteration_time_s"]
            grad = [c for c in res["collectives"] if c["purpose"] == "grad_sync"]
            ok = ok and len(grad) == 1 and grad[0]["group"] == "dp" and grad[0]["wire_bytes"] > 0
        check(ok, "mlp-small dp2: result has a measured iteration whose breakdown adds up, and "
                  "its gradient all-reduce row")
        if ok:
            with open(trace) as f:
                ev = json.load(f)["traceEvents"]
            pids = {e["pid"] for e in ev if e.get("ph") == "X"}
            kernels = [e for e in ev if e.get("ph") == "X" and e["tid"] == 0 and e["pid"] == 0]
            # 6 layers forward + 6 backward + the optimizer step per iteration
            check(pids == {0, 1} and len(kernels) == 13 * ITERS,
                  f"trace: spans on both ranks, {len(kernels)} kernels on rank 0 (expected {13 * ITERS})")

        # without an EP group the capacity is decided per rank: a different function of the batch
        ref_res, ref_w, _ = serial["moe-tiny"]
        res, w, _ = run(tmp, "moe-dp2", ["--workload", moe_tiny, "--gpus", "2"])
        if ref_res and res:
            d = abs(ref_res["loss"][0] - res["loss"][0]) / ref_res["loss"][0]
            check(d > 1e-5, f"moe-tiny dp2 without ep: per-rank capacity drops other tokens "
                            f"(loss rel {d:.1e} > 1e-5)")
        else:
            check(False, "moe-tiny dp2 runs")

        # the device path on the CPU: every tensor in kn_cpu_guarded's memory, which the host
        # cannot read outside the backend's functions, so a forgotten host access crashes; the
        # kernels are the CPU twins, so the weights must be the CPU backend's bit for bit
        guarded = [
            ("mlp-small", ["--gpus", "1"]),
            ("cnn-small", ["--gpus", "1"]),
            ("gpt-tiny", ["--gpus", "4", "--pp", "2", "--dp", "2", "--microbatches", "8",
                          "--schedule", "1f1b"]),
            (gpt_sgd, ["--gpus", "4", "--pp", "4", "--microbatches", "8"]),
            (cnn_nobn, ["--gpus", "4", "--pp", "2", "--dp", "2", "--microbatches", "8",
                        "--schedule", "1f1b"]),
            (moe_tiny, ["--gpus", "1"]),
            # Megatron's splits: vocabulary-parallel embedding and cross-entropy, heads, row sums
            (gpt_sgd, ["--gpus", "2", "--tp", "2", "--tp-style", "megatron"]),
            (gpt_sgd, ["--gpus", "4", "--tp", "2", "--pp", "2", "--tp-style", "megatron",
                       "--microbatches", "2", "--schedule", "1f1b"]),
            (llama_sgd, ["--gpus", "2", "--tp", "2", "--tp-style", "megatron"]),
            # sequence parallelism's chunks moved by the backend's own copies
            (llama_sgd, ["--gpus", "4", "--tp", "2", "--pp", "2", "--tp-style", "megatron",
                         "--sequence-parallel", "--microbatches", "2"]),
            (gpt_sgd, ["--gpus", "2", "--pp", "2", "--schedule", "interleaved",
                       "--virtual-stages", "2", "--microbatches", "4"]),
            (gpt_sgd, ["--gpus", "2", "--tp", "2", "--tp-style", "megatron", "--recompute",
                       "full"]),
            # sharded states: shard gradients and the step's NaN in the backend's memory
            (gpt_sgd, ["--gpus", "4", "--zero", "3", "--microbatches", "2"]),
            (gpt_sgd, ["--gpus", "4", "--fsdp", "hybrid", "--fsdp-shard-size", "2"]),
            (gpt_sgd, ["--gpus", "2", "--fsdp", "grad-op", "--microbatches", "2"]),
            # context parallelism: the ring's blocks and messages, Ulysses' all-to-alls through
            # host copies of the backend's buffers
            (llama_sgd, ["--gpus", "4", "--cp", "4"]),
            (gpt_sgd, ["--gpus", "4", "--cp", "2", "--pp", "2", "--microbatches", "2",
                       "--recompute"]),
            (llama_sgd, ["--gpus", "2", "--cp", "2", "--cp-style", "ulysses"]),
        ]
        for i, (wl, opts) in enumerate(guarded):
            args = ["--workload", wl] + opts
            name = f"{os.path.basename(wl).replace('.json', '')} {' '.join(opts)}"
            _, plain, _ = run(tmp, f"plain{i}", args)
            res, staged, p = run(tmp, f"guarded{i}", args, guarded=True)
            ok = plain is not None and staged is not None and plain[1] == staged[1] and \
                res["kernel_db"]["provenance"]["backend"] == "cpu-guarded"
            check(ok, f"{name}: through the guarded device backend, the same weights bit for bit"
                      f"{'' if staged is not None else ': ' + p.stderr.strip()}")
        _, _, p = run(tmp, "guarded-grid", ["--workload", cnn_nobn, "--gpus", "2", "--grid", "2x1"],
                      expect_rc=2, guarded=True)
        check(p.returncode == 2 and "(rows split): grid, domain, expert" in p.stderr and
              p.stderr.count("\n") == 1,
              f"Gholami's row split refused on a device backend: {p.stderr.strip()}")
        _, _, p = run(tmp, "recompute-domain", ["--workload", cnn_nobn, "--gpus", "4", "--grid",
                                                "4x1", "--domain", "conv", "--recompute"],
                      expect_rc=2)
        check(p.returncode == 2 and "--recompute full with --domain conv" in p.stderr and
              p.stderr.count("\n") == 1,
              f"--recompute full with domain splits refused in one line: {p.stderr.strip()}")
        _, _, p = run(tmp, "zero-tied-pp", ["--workload", gpt_sgd, "--gpus", "4", "--pp", "2",
                                            "--zero", "1"], expect_rc=2)
        check(p.returncode == 2 and "shares the weights of 'tok_embed' across stages" in p.stderr
              and p.stderr.count("\n") == 1,
              f"--zero with weights tied across stages refused in one line: {p.stderr.strip()}")
        _, _, p = run(tmp, "cuda-tp", ["--workload", cnn_nobn, "--gpus", "2", "--tp", "2",
                                       "--device", "cuda"], expect_rc=2)
        check(p.returncode == 2 and "--device cuda: --tp-style gholami" in p.stderr and
              p.stderr.count("\n") == 1,
              f"--device cuda --tp 2 on a CNN refused before anything runs: {p.stderr.strip()}")

        # --device cuda on this machine: it runs where a GPU is, else exit 2 and one line
        p = subprocess.run([DLSIM, "run", "--mode", "real", "--device", "cuda", "--workload",
                            "mlp-small", "--gpus", "1", "--iters", "1"], capture_output=True,
                           text=True)
        check(p.returncode == 0 or (p.returncode == 2 and p.stderr.startswith("dlsim: --device cuda: ")
                                    and p.stderr.count("\n") == 1),
              f"--device cuda: runs, or says why not: {p.stderr.strip() or 'ran'}")

        # what the real executor refuses, with exit status 2 and one line
        _, _, p = run(tmp, "fp16", ["--workload", "mlp-small", "--gpus", "2", "--precision", "fp16"],
                      expect_rc=2)
        check(p.returncode == 2 and "--precision" in p.stderr and p.stderr.count("\n") == 1,
              f"--precision fp16 refused in real mode: {p.stderr.strip()}")
    print(f"{time.time() - t0:.1f} s")
    print(f"PASSED: {failures} failure(s)" if failures == 0 else f"FAILED: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
