#!/usr/bin/python3
"""Times PyTorch's own implementation of every kernel of a dlsim kernel database at the same
shape and precision; ratio = dlsim median_s / torch median_s (> 1: dlsim's kernel is slower).

  kernels/torch_compare.py DB.json --out RESULT.json [--md TABLE.md] [--limit N]
                           [--max-seconds S] [--only KNAME_PREFIX]
  kernels/torch_compare.py DB.json --dry-run [--out R.json --md T.md]   # no torch: the plan
  kernels/torch_compare.py --from-result RESULT.json --md TABLE.md       # the table only
  kernels/torch_compare.py DB.json --from-result RESULT.json --db-out FRAMEWORK.json
  kernels/torch_compare.py DB.json --from-result RESULT.json --db-add FRAMEWORK.json

--db-out writes the framework's times as a kernel database of their own: every entry of DB.json
with its PyTorch time in place of dlsim's (entries PyTorch did not time, such as flatten, keep
dlsim's), provenance "backend": "pytorch" with the versions, for `dlsim run --kernels FILE`.
--db-add adds to an existing framework database the entries of DB.json that PyTorch timed (new
keys are added, keys it holds get the new times; nothing else changes but a provenance line
saying what was added), for a DB.json that holds only newly measured entries.

DB.json is written by `dlsim kbench --device cuda`; each entry's "shape" gives the sizes as
kernels/bench.c sets them up (linear M = n*in_h*in_w rows, IC = in_c, OC = out_c; sequences
(N, T, C) with T = out_h*out_w; ...). Entries whose shape lacks a field their kind needs (older
kbench) are skipped with a reason, and so is flatten (a view; dlsim launches nothing).

Torch ops: conv2d F.conv2d / aten.convolution_backward (mask [needs_dx, 1, bias]); linear
F.linear / two matmuls + column sum; batchnorm aten.native_batch_norm(_backward), training,
running stats updated (extra torch_api_s: F.batch_norm, whichever backend it picks); layernorm
aten.native_layer_norm(_backward); relu, gelu (tanh), dropout (p 0.5), add elementwise (bwd:
threshold_backward, gelu_backward, native_dropout_backward, two in-place accumulations for add as
dlsim's add_bwd); pools aten.max_pool2d_with_indices / avg_pool2d and their backwards; embedding
F.embedding / embedding_dense_backward; attention F.scaled_dot_product_attention(is_causal=True)
(torch_s = torch_sdpa_s) plus the unfused q@k^T, masked softmax, @v (torch_math_s); softmax_ce
F.cross_entropy; lrn F.local_response_norm; grouped-query attention (kv_heads) reads Megatron-Core's
grouped QKV (per K/V head: its queries, k, v) into SDPA with enable_gqa; rmsnorm F.rms_norm
(float32 weight); swiglu F.silu(gate) * up on the two halves; rope rotate-half in eager ops on
the q and k slots (the angles computed once, outside the timing); moe a plain loop over experts (router, softmax,
top-k, dlsim's capacity and priority, index_select, linear-GELU-linear, gated index_add; one
host sync); sgd SGD(momentum 0.9, foreach) and adam AdamW(fused) steps on one flat fp32
parameter. The backwards of attention, softmax_ce, lrn and moe go through torch.autograd.grad on
a graph built once (retain_graph=True): autograd overhead included, as each entry's note says.

Precision: fp32 = float32, TF32 off in cuBLAS and cuDNN; tf32 = float32, TF32 on; fp16/bf16 =
tensors of that dtype for every kind, but batchnorm/layernorm weights stay float32 (optimizer
steps are always fp32: master weights). cudnn.benchmark is on.

Timing, as dlsim's harness (kernels/harness.c) but for one more warm-up call (3; the harness makes
2, and both are past cuDNN's algorithm search after the first): then repeats each after an L2
flush (zeroing twice the L2) between their own pair of CUDA events, in groups of 5 until the
median moves < 2 % between groups, or 0.3 s of timed time, or 100 repeats; median reported.
RESULT.json (and TABLE.md) are rewritten after every entry; --limit / --max-seconds stop cleanly.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time

PRECS = ("fp32", "tf32", "fp16", "bf16")
KINDS = ("conv2d", "linear", "batchnorm", "layernorm", "relu", "gelu", "dropout", "add",
         "maxpool", "avgpool", "embedding", "attention", "softmax_ce", "lrn", "moe", "flatten",
         "rmsnorm", "swiglu", "rope")
NEEDS = {"conv2d": ("kh", "kw", "stride", "pad", "groups", "bias", "needs_dx"),
         "linear": ("bias", "needs_dx"), "maxpool": ("kh", "kw", "stride", "pad"),
         "avgpool": ("kh", "kw", "stride", "pad"), "attention": ("heads",),
         "embedding": ("vocab",), "lrn": ("kh",), "rope": ("heads",),
         "moe": ("experts", "top_k", "ffn", "capacity_factor", "bias")}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def write_atomic(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def plan(e):
    """Sizes of one database entry as kernels/bench.c's setup() uses them, plus a one-line
    description; {'skip': reason} when it cannot or need not be timed. No torch needed."""
    s = e.get("shape") or {}
    kname = str(e.get("kname", ""))
    kind = s.get("kind") or kname.split(".")[0]
    prec = e.get("precision")
    if prec not in PRECS:
        return {"skip": f"unknown precision {prec!r}"}
    if not isinstance(e.get("median_s"), (int, float)) or e["median_s"] <= 0:
        return {"skip": "entry has no median_s"}
    if kind in ("sgd", "adam"):
        p = s.get("params")
        if not isinstance(p, int) or p < 1:
            return {"skip": "optimizer entry without shape.params"}
        opt = "SGD(momentum=0.9, foreach)" if kind == "sgd" else "AdamW(fused)"
        return {"kind": kind, "bwd": 0, "prec": prec, "P": p,
                "desc": f"{opt}.step on {p} fp32 parameters"}
    if kind == "flatten":
        return {"skip": "flatten is a no-op view (dlsim launches nothing either)"}
    if kind not in KINDS:
        return {"skip": f"unknown kind {kind!r}"}
    miss = [f for f in ("n", "in", "out") + NEEDS.get(kind, ()) if f not in s]
    if miss:
        return {"skip": "shape lacks " + ", ".join(miss) + " (database written by an older "
                "kbench)"}
    bwd = int(s["bwd"]) if "bwd" in s else int(kname.endswith(".bwd"))
    n = int(s["n"])
    ic, ih, iw = (int(v) for v in s["in"])
    oc, oh, ow = (int(v) for v in s["out"])
    d = {"kind": kind, "bwd": bwd, "prec": prec, "N": n}
    if kind == "conv2d":
        g = int(s["groups"]) or 1
        g = 1 if ic % g or oc % g else g  # as bench.c
        st, pd, kh, kw = max(1, int(s["stride"])), int(s["pad"]), int(s["kh"]), int(s["kw"])
        d.update(Ci=ic, H=ih, W=iw, Co=oc, kh=kh, kw=kw, st=st, pd=pd, g=g,
                 Ho=(ih + 2 * pd - kh) // st + 1, Wo=(iw + 2 * pd - kw) // st + 1,
                 bias=int(s["bias"]), dx=int(s["needs_dx"]))
        if (d["Ho"], d["Wo"]) != (oh, ow):
            d["note"] = f"output {d['Ho']}x{d['Wo']} from the window, shape.out says {oh}x{ow}"
    elif kind == "linear":
        d.update(M=n * ih * iw, IC=ic, OC=oc, bias=int(s["bias"]), dx=int(s["needs_dx"]))
    elif kind in ("batchnorm", "lrn"):
        d.update(C=oc, H=oh, W=ow, **({"size": int(s["kh"]) or 5} if kind == "lrn" else {}))
    elif kind in ("layernorm", "softmax_ce"):
        d.update(M=n * oh * ow, **({"C": oc} if kind == "layernorm" else {"V": oc}))
    elif kind in ("relu", "gelu", "dropout", "add"):
        d["numel"] = n * oc * oh * ow
    elif kind in ("maxpool", "avgpool"):
        d.update(C=oc, H=ih, W=iw, kh=int(s["kh"]), kw=int(s["kw"]),
                 st=max(1, int(s["stride"])), pd=int(s["pad"]))
    elif kind == "embedding":
        d.update(T=oh * ow, C=oc, V=max(1, int(s["vocab"])))
    elif kind == "attention":
        nh, kv = max(1, int(s["heads"])), int(s.get("kv_heads", 0))
        nh, kv = (1, 0) if oc % nh else (nh, kv if kv > 0 and nh % kv == 0 else 0)
        d.update(T=oh * ow, C=oc, NH=nh, KV=kv, flash=int(s.get("flash", 0)))
    elif kind == "rmsnorm":
        d.update(M=n * oh * ow, C=oc)
    elif kind == "swiglu":
        d.update(M=n * oh * ow, C=oc)
    elif kind == "rope":  # in_c = (NH + 2 KV) hs, as bench.c: the split keeps whole groups
        nh, kv = max(1, int(s["heads"])), int(s.get("kv_heads", 0)) or max(1, int(s["heads"]))
        kv = nh if nh % kv else kv
        units = nh + 2 * kv
        hs = ic // units if ic % units == 0 and (ic // units) % 2 == 0 else 2
        d.update(T=oh * ow, NH=nh, KV=kv, hs=hs)
    elif kind == "moe":
        E, k, cf, M = max(1, int(s["experts"])), int(s["top_k"]), float(s["capacity_factor"]), \
            n * oh * ow
        k, cf = (k if 1 <= k <= E else 1), (cf if cf > 0 else 1.0)
        d.update(M=M, C=oc, E=E, K=k, F=int(s["ffn"]), bias=int(s["bias"]),
                 cap=min(M, max(1, math.ceil(cf * k * M / E - 1e-9))))
    d["desc"] = f"{kind}.{'bwd' if bwd else 'fwd'} " + " ".join(
        f"{k}={v}" for k, v in d.items() if k not in ("kind", "bwd", "prec", "note"))
    return d


# ---- torch part: nothing above this line imports torch -------------------------------------

def set_tf32(torch, on, state):
    """TF32 for cuBLAS and cuDNN through the legacy flags (consistent with the new per-backend
    settings); the new API only when the legacy setters are gone. Returns what was set."""
    if state.get("tf32") == on:
        return state["tf32_how"]
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.backends.cuda.matmul.allow_tf32 = on
            torch.backends.cudnn.allow_tf32 = on
            how = f"allow_tf32={on}"
        except Exception as ex:  # legacy flags removed: the per-backend settings
            v = "tf32" if on else "ieee"
            torch.backends.cuda.matmul.fp32_precision = v
            torch.backends.cudnn.conv.fp32_precision = v
            how = f"fp32_precision={v} (legacy flags: {ex})"
    state.update(tf32=on, tf32_how=how)
    return how


def time_fn(torch, fn, flush, warmup=3, min_rep=5, max_rep=100, budget=0.3, tol=0.02):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts, total, prev, stable = [], 0.0, 0.0, False
    while len(ts) < max_rep:
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        t = a.elapsed_time(b) / 1e3
        ts.append(t)
        total += t
        if len(ts) >= min_rep and len(ts) % min_rep == 0:
            med = statistics.median(ts)
            if prev > 0 and abs(med - prev) <= tol * prev:
                stable = True
                break
            prev = med
            if total >= budget:
                break
    return {"median_s": statistics.median(ts), "min_s": min(ts), "mean_s": sum(ts) / len(ts),
            "stddev_s": statistics.pstdev(ts), "repeats": len(ts), "stable": stable}


def setups(torch, d):
    """({label: setup}, notes): a setup allocates the inputs and returns the op to time. 'main'
    is the framework's time; other labels are extra columns (torch_<label>_s)."""
    F, aten = torch.nn.functional, torch.ops.aten
    dt = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
          "bf16": torch.bfloat16}[d["prec"]]
    f32, dev, k, bwd, N, notes = torch.float32, "cuda", d["kind"], d["bwd"], d.get("N", 0), []

    def rn(*shape, dtype=dt, grad=False, scale=1.0):
        x = torch.randn(*shape, device=dev, dtype=dtype)
        return (x * scale if scale != 1.0 else x).requires_grad_(grad)

    def ag(y, leaves, note="backward through torch.autograd.grad (autograd overhead included)"):
        notes.append(note)  # the backward of a graph built once, through autograd
        dy = torch.randn_like(y)
        return lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True)

    def norm_weights(x):  # float32 weights as AMP keeps them, else the input's dtype
        w, b = 1.0 + rn(d["C"], dtype=f32, scale=0.1), rn(d["C"], dtype=f32)
        try:
            (aten.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5) if k == "batchnorm"
             else aten.native_layer_norm(x, [d["C"]], w, b, 1e-5))
        except Exception as ex:
            notes.append(f"norm weights in {dt} (float32 refused: {str(ex)[:100]})")
            w, b = w.to(dt), b.to(dt)
        return w, b

    def heads(qkv):  # (N,T,3C) -> q, k, v (N,NH,T,hs), split as GPT implementations do
        if d.get("KV"):  # Megatron-Core's grouped layout: per K/V head, its queries, k, v
            NH, KV = d["NH"], d["KV"]
            r, hs = NH // KV, d["C"] // NH
            g = qkv.view(N, d["T"], KV, r + 2, hs)
            return [g[:, :, :, :r].reshape(N, d["T"], NH, hs).transpose(1, 2),
                    g[:, :, :, r].transpose(1, 2), g[:, :, :, r + 1].transpose(1, 2)]
        return [t.view(N, d["T"], d["NH"], -1).transpose(1, 2) for t in qkv.split(d["C"], 2)]

    def sdpa(qkv):
        q, kk, v = heads(qkv)
        if d.get("KV"):
            try:
                y = F.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=True)
            except TypeError:  # a PyTorch without enable_gqa: the K/V heads repeated
                r = d["NH"] // d["KV"]
                notes.append("K/V heads repeated for SDPA (no enable_gqa)")
                y = F.scaled_dot_product_attention(q, kk.repeat_interleave(r, 1),
                                                   v.repeat_interleave(r, 1), is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        return y.transpose(1, 2).reshape(N, d["T"], d["C"])

    def angles(dtype):  # cos, sin of every position and pair, computed once (as frameworks cache)
        hs, half = d["hs"], d["hs"] // 2
        j = torch.arange(half, device=dev, dtype=torch.float64)
        a = torch.arange(d["T"], device=dev, dtype=torch.float64)[:, None] * \
            torch.pow(500000.0, -2.0 * j / hs)[None, :]
        return [torch.cat([f, f], 1).to(dtype)[:, None, None, :] for f in (a.cos(), a.sin())]

    def rope(x, cos, sin):  # rotate-half on the q and k slots of the grouped QKV, v as it is
        NH, KV, hs, T = d["NH"], d["KV"], d["hs"], d["T"]
        r, half = NH // KV, hs // 2
        g = x.view(N, T, KV, r + 2, hs)
        qk = g[:, :, :, :r + 1]
        turned = torch.cat([-qk[..., half:], qk[..., :half]], -1)
        return torch.cat([qk * cos + turned * sin, g[:, :, :, r + 1:]], 3)

    def unfused(qkv):
        q, kk, v = heads(qkv)
        T = d["T"]
        mask = torch.ones(T, T, device=dev, dtype=torch.bool).tril_()
        att = (q @ kk.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        return (att @ v).transpose(1, 2).reshape(N, T, d["C"])

    def attention(f):
        def setup():  # the QKV: 3C wide, or (NH + 2 KV) head widths under grouped-query
            w = 3 * d["C"] if not d.get("KV") else (d["NH"] + 2 * d["KV"]) * (d["C"] // d["NH"])
            x = rn(N, d["T"], w, grad=bool(bwd))
            return ag(f(x), [x]) if bwd else (lambda: f(x))
        return setup

    def moe(x, wr, br, w1, b1, w2, b2):
        M, E, K, cap = d["M"], d["E"], d["K"], d["cap"]
        probs = torch.softmax(F.linear(x, wr, br).float(), dim=-1)
        idx = probs.topk(K, dim=-1)[1]
        flat = idx.t().reshape(-1)  # dlsim's priority: every token's 1st choice, then 2nd, ...
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=E).tolist()  # the one host sync
        out, start = torch.zeros(M, d["C"], device=dev, dtype=dt), 0
        for e in range(E):
            sel, start = order[start:start + min(counts[e], cap)], start + counts[e]
            if sel.numel():
                tok = sel % M
                h = F.gelu(F.linear(x.index_select(0, tok), w1[e], b1[e]), approximate="tanh")
                out.index_add_(0, tok, F.linear(h, w2[e], b2[e]) * probs[tok, e].to(dt)[:, None])
        return out

    def main():
        if k in ("sgd", "adam"):
            notes.append("fp32 parameter (master weights); step() Python overhead included")
            p = torch.nn.Parameter(rn(d["P"], dtype=f32))
            p.grad = torch.randn_like(p)
            return (torch.optim.SGD([p], lr=1e-3, momentum=0.9, weight_decay=0.0, foreach=True)
                    if k == "sgd" else torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.999),
                                                         eps=1e-8, weight_decay=0.0,
                                                         fused=True)).step
        if k == "conv2d":
            x, w = rn(N, d["Ci"], d["H"], d["W"]), rn(d["Co"], d["Ci"] // d["g"], d["kh"], d["kw"])
            b = rn(d["Co"]) if d["bias"] else None
            st, pd, g = [d["st"]] * 2, [d["pd"]] * 2, d["g"]
            if not bwd:
                return lambda: F.conv2d(x, w, b, st, pd, 1, g)
            dy, bs = rn(N, d["Co"], d["Ho"], d["Wo"]), [d["Co"]] if d["bias"] else None
            mask = [bool(d["dx"]), True, bool(d["bias"])]
            return lambda: aten.convolution_backward(dy, x, w, bs, st, pd, [1, 1], False, [0, 0],
                                                     g, mask)
        if k == "linear":
            x, w, dy = rn(d["M"], d["IC"]), rn(d["OC"], d["IC"]), rn(d["M"], d["OC"])
            b = rn(d["OC"]) if d["bias"] else None
            if not bwd:
                return lambda: F.linear(x, w, b)
            return lambda: (dy @ w if d["dx"] else None, dy.t() @ x,
                            dy.sum(0) if d["bias"] else None)
        if k == "layernorm":
            x = rn(d["M"], d["C"])
            w, b = norm_weights(x)
            if not bwd:
                return lambda: aten.native_layer_norm(x, [d["C"]], w, b, 1e-5)
            _, mean, rstd = aten.native_layer_norm(x, [d["C"]], w, b, 1e-5)
            dy = torch.randn_like(x)
            return lambda: aten.native_layer_norm_backward(dy, x, [d["C"]], mean, rstd, w, b,
                                                           [True, True, True])
        if k == "batchnorm":
            x = rn(N, d["C"], d["H"], d["W"])
            w, b = norm_weights(x)
            rm, rv = torch.zeros(d["C"], device=dev), torch.ones(d["C"], device=dev)
            if not bwd:
                return lambda: aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
            _, sm, si = aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
            dy = torch.randn_like(x)
            return lambda: aten.native_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, 1e-5,
                                                           [True, True, True])
        if k in ("relu", "gelu", "dropout", "add"):
            x, y, dy = rn(d["numel"]), rn(d["numel"]), rn(d["numel"])
            if not bwd:
                return {"relu": lambda: torch.relu(x), "add": lambda: torch.add(x, y),
                        "gelu": lambda: F.gelu(x, approximate="tanh"),
                        "dropout": lambda: aten.native_dropout(x, 0.5, True)}[k]
            if k == "relu":
                y = torch.relu(x)
                return lambda: aten.threshold_backward(dy, y, 0)
            if k == "gelu":
                return lambda: aten.gelu_backward(dy, x, approximate="tanh")
            if k == "dropout":
                mask = aten.native_dropout(x, 0.5, True)[1]
                return lambda: aten.native_dropout_backward(dy, mask, 2.0)
            notes.append("add bwd: two in-place accumulations as dlsim's add_bwd (autograd "
                         "itself passes the gradient through without a kernel)")
            return lambda: (x.add_(dy), y.add_(dy))
        if k in ("maxpool", "avgpool"):
            x, ks, st, pd = rn(N, d["C"], d["H"], d["W"]), [d["kh"], d["kw"]], [d["st"]] * 2, \
                [d["pd"]] * 2
            if k == "maxpool":
                if not bwd:
                    return lambda: aten.max_pool2d_with_indices(x, ks, st, pd, [1, 1], False)
                y, idx = aten.max_pool2d_with_indices(x, ks, st, pd, [1, 1], False)
                dy = torch.randn_like(y)
                return lambda: aten.max_pool2d_with_indices_backward(dy, x, ks, st, pd, [1, 1],
                                                                     False, idx)
            if not bwd:
                return lambda: aten.avg_pool2d(x, ks, st, pd, False, True, None)
            dy = torch.randn_like(aten.avg_pool2d(x, ks, st, pd, False, True, None))
            return lambda: aten.avg_pool2d_backward(dy, x, ks, st, pd, False, True, None)
        if k == "embedding":
            tok = torch.randint(0, d["V"], (N, d["T"]), device=dev)
            if not bwd:
                w = rn(d["V"], d["C"])
                return lambda: F.embedding(tok, w)
            dy = rn(N, d["T"], d["C"])
            return lambda: aten.embedding_dense_backward(dy, tok, d["V"], -1, False)
        if k == "attention":
            return attention(sdpa)()
        if k == "rmsnorm":
            notes.append("F.rms_norm (eps 1e-5); backward through autograd")
            x = rn(d["M"], d["C"], grad=bool(bwd))
            w = (1.0 + rn(d["C"], dtype=f32, scale=0.1)).requires_grad_(bool(bwd))
            try:
                F.rms_norm(x.detach(), [d["C"]], w.detach(), 1e-5)
            except Exception as ex:
                notes.append(f"norm weight in {dt} (float32 refused: {str(ex)[:100]})")
                w = w.detach().to(dt).requires_grad_(bool(bwd))
            return (ag(F.rms_norm(x, [d["C"]], w, 1e-5), [x, w]) if bwd
                    else lambda: F.rms_norm(x, [d["C"]], w, 1e-5))
        if k == "swiglu":
            notes.append("F.silu(gate) * up on the two halves of the fused input")
            x = rn(d["M"], 2 * d["C"], grad=bool(bwd))

            def swiglu(v):
                a, b = v.chunk(2, -1)
                return F.silu(a) * b
            return ag(swiglu(x), [x]) if bwd else lambda: swiglu(x)
        if k == "rope":
            notes.append("rotate-half in eager PyTorch ops (Megatron fuses it), angles "
                         "precomputed")
            x = rn(N, d["T"], (d["NH"] + 2 * d["KV"]) * d["hs"], grad=bool(bwd))
            cs = angles(dt)
            return ag(rope(x, *cs), [x]) if bwd else lambda: rope(x, *cs)
        if k == "softmax_ce":
            z = rn(d["M"], d["V"], grad=bool(bwd))
            tgt = torch.randint(0, d["V"], (d["M"],), device=dev)
            return ag(F.cross_entropy(z, tgt), [z]) if bwd else lambda: F.cross_entropy(z, tgt)
        if k == "lrn":
            x = rn(N, d["C"], d["H"], d["W"], grad=bool(bwd))
            return (ag(F.local_response_norm(x, d["size"], 1e-4, 0.75, 2.0), [x]) if bwd
                    else lambda: F.local_response_norm(x, d["size"], 1e-4, 0.75, 2.0))
        if k == "moe":
            notes.append("a loop over experts with index_select/index_add; one host sync")
            C, E, Fh, g = d["C"], d["E"], d["F"], bool(bwd)
            ws = [rn(d["M"], C, grad=g), rn(E, C, grad=g, scale=C ** -0.5),
                  rn(E, grad=g) if d["bias"] else None, rn(E, Fh, C, grad=g, scale=C ** -0.5),
                  rn(E, Fh, grad=g), rn(E, C, Fh, grad=g, scale=Fh ** -0.5), rn(E, C, grad=g)]
            return ag(moe(*ws), [w for w in ws if w is not None]) if bwd else lambda: moe(*ws)
        raise ValueError(f"no torch mapping for kind {k!r}")

    extra = {"attention": {"math": attention(unfused)}}.get(k, {}) if not d.get("KV") else {}
    if k == "batchnorm":  # the public API, whichever backend (cuDNN or native) it dispatches to
        def api():
            x = rn(N, d["C"], d["H"], d["W"], grad=bool(bwd))
            w, b = (t.requires_grad_(bool(bwd)) for t in norm_weights(x.detach()))
            rm, rv = torch.zeros(d["C"], device=dev), torch.ones(d["C"], device=dev)
            f = (lambda: F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5))
            return ag(f(), [x, w, b], "torch_api_s: F.batch_norm, backward through autograd") \
                if bwd else f
        extra = {"api": api}
    return {"main": main, **extra}, notes


def torch_env():
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to torch")
    torch.backends.cudnn.benchmark = True
    p = torch.cuda.get_device_properties(0)
    l2 = int(getattr(p, "L2_cache_size", 0) or 50 << 20)
    flush = torch.empty(2 * l2 // 4, device="cuda", dtype=torch.float32)
    prov = {"gpu": torch.cuda.get_device_name(0), "sm_count": p.multi_processor_count,
            "l2_bytes": l2, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "cudnn_benchmark": True}
    return torch, flush, prov


def summarize(entries):
    """Rows per (kname, precision) of entries timed on both sides."""
    groups = {}
    for e in entries:
        if all(isinstance(e.get(f), (int, float)) and e[f] > 0 for f in ("dlsim_s", "torch_s")):
            groups.setdefault((e["kname"], e["precision"]), []).append(e)
    rows = []
    for (kn, pr), es in sorted(groups.items()):
        sd, st = sum(e["dlsim_s"] for e in es), sum(e["torch_s"] for e in es)
        worst = max(es, key=lambda e: abs(math.log(e["ratio"])))
        sm = [e["torch_math_s"] for e in es if isinstance(e.get("torch_math_s"), (int, float))]
        rows.append({"kname": kn, "precision": pr, "entries": len(es), "dlsim_s": sd,
                     "torch_s": st, "ratio_tw": sd / st,
                     "ratio_median": statistics.median(e["ratio"] for e in es),
                     "worst_ratio": worst["ratio"], "worst_key": worst["key"],
                     "math_s": sum(sm) if len(sm) == len(es) else None})
    return rows


def markdown(res):
    pv = res.get("provenance", {})
    out = [f"# dlsim CUDA kernels against PyTorch ({pv.get('gpu', '?')})", "",
           f"GPU {pv.get('gpu', '?')}; torch {pv.get('torch', '?')}, CUDA {pv.get('cuda', '?')}, "
           f"cuDNN {pv.get('cudnn', '?')}; {pv.get('date', '?')}; database {pv.get('db', '?')} "
           f"(device {pv.get('db_device', '?')}, measured {pv.get('db_date', '?')})"
           + (" — DRY RUN, nothing timed" if pv.get("dry_run") else "")
           + (f" — ERROR: {res['error']}" if res.get("error") else ""), "",
           "ratio = dlsim median / PyTorch median (> 1: dlsim's kernel is slower); "
           "time-weighted = sum dlsim / sum PyTorch; worst = the ratio farthest from 1.", "",
           "| kernel | precision | entries | dlsim (ms) | PyTorch (ms) | time-weighted | median "
           "| worst | worst key |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    rows = summarize(res.get("entries", []))
    for r in rows:
        out.append(f"| {r['kname']} | {r['precision']} | {r['entries']} | {r['dlsim_s'] * 1e3:.3f} "
                   f"| {r['torch_s'] * 1e3:.3f} | {r['ratio_tw']:.2f} | {r['ratio_median']:.2f} | "
                   f"{r['worst_ratio']:.2f} | `{r['worst_key']}` |")
    if rows:
        sd, st = sum(r["dlsim_s"] for r in rows), sum(r["torch_s"] for r in rows)
        out.append(f"| **all** | | {sum(r['entries'] for r in rows)} | {sd * 1e3:.3f} | "
                   f"{st * 1e3:.3f} | {sd / st:.2f} | | | |")
    for r in rows:
        if r["math_s"]:
            out.append(f"\n{r['kname']} {r['precision']}: the unfused math attention takes "
                       f"{r['math_s'] * 1e3:.3f} ms "
                       f"(dlsim / math = {r['dlsim_s'] / r['math_s']:.2f}).")
    ents = res.get("entries", [])
    skipped, errors = {}, [e for e in ents if e.get("error")]
    for e in ents:
        if e.get("skipped"):
            skipped[e["skipped"]] = skipped.get(e["skipped"], 0) + 1
    out.append(f"\n{len(ents)} entries: {sum(1 for e in ents if e.get('torch_s'))} timed, "
               f"{sum(skipped.values())} skipped, {len(errors)} with errors"
               + (f"; stopped early: {res['stopped']}" if res.get("stopped") else "") + ".")
    for why, c in sorted(skipped.items()):
        out.append(f"- skipped ({c}): {why}")
    for e in errors[:20]:
        out.append(f"- error: `{e['key']}`: {e['error'][:200]}")
    return "\n".join(out) + "\n"


def measure(torch, flush, state, e, d, r):
    """Times every op of entry e (planned as d) into its result row r."""
    notes = [d["note"]] if d.get("note") else []
    try:
        r["tf32"] = set_tf32(torch, d["prec"] == "tf32", state)
        fns, notes_of_setup = setups(torch, d)
        for label, setup in fns.items():
            op = None
            try:
                op = setup()
                st = time_fn(torch, op, flush)
                if label == "main":
                    r.update(torch_s=st["median_s"], torch_min_s=st["min_s"],
                             torch_mean_s=st["mean_s"], torch_stddev_s=st["stddev_s"],
                             repeats=st["repeats"],
                             stable=st["stable"], ratio=e["median_s"] / max(st["median_s"], 1e-9))
                    if d["kind"] == "attention":
                        r["torch_sdpa_s"] = st["median_s"]
                else:
                    r[f"torch_{label}_s"] = st["median_s"]
            except Exception as ex:  # out of memory included: recorded, and on to the next
                r["error" if label == "main" else f"error_{label}"] = \
                    f"{type(ex).__name__}: {str(ex)[:400]}"
            finally:
                op = None
                try:
                    torch.cuda.empty_cache()
                except Exception:
                    pass
        notes += notes_of_setup
    except Exception as ex:
        r["error"] = f"{type(ex).__name__}: {str(ex)[:400]}"
    r["note"] = "; ".join(sorted(set(n for n in notes if n)))


def framework_db(db, result):
    """The kernel database of PyTorch's times: `db`'s entries with the times of `result`."""
    timed = {r["key"]: r for r in result.get("entries", []) if r.get("torch_s")
             and not r.get("error")}
    rp = result.get("provenance", {})
    prov = dict(db.get("provenance", {}))
    prov.update(backend="pytorch", device_full_name=rp.get("gpu", prov.get("device_full_name")),
                framework=f"PyTorch {rp.get('torch')} (CUDA {rp.get('cuda')}, cuDNN "
                          f"{rp.get('cudnn')}, cudnn.benchmark on)",
                timing="CUDA events around the framework's op; L2 flushed (zeroing 2x L2) before "
                       "each repeat (kernels/torch_compare.py)",
                measured_from=result.get("provenance", {}).get("db"), date=rp.get("date"),
                note="the framework's own kernels (cuDNN, cuBLAS, PyTorch) at the shapes and "
                     "precisions of dlsim's database; entries it did not time keep dlsim's time")
    entries, n = [], 0
    for e in db.get("entries", []):
        e = dict(e)
        r = timed.get(e.get("key"))
        if r:
            e["median_s"] = r["torch_s"]
            e["mean_s"] = r.get("torch_mean_s", r["torch_s"])
            e["stddev_s"] = r.get("torch_stddev_s", 0.0)
            e["repeats"] = r.get("repeats", e.get("repeats"))
            n += 1
        entries.append(e)
    prov["framework_entries"] = n
    out = {k: v for k, v in db.items() if k not in ("provenance", "entries")}
    out.update(provenance=prov, entries=entries)
    return out, n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", nargs="?", help="dlsim kernel database (JSON)")
    ap.add_argument("--out", help="result JSON (rewritten after every entry)")
    ap.add_argument("--md", help="also write a Markdown table here")
    ap.add_argument("--limit", type=int, default=0, help="at most N entries (after --only)")
    ap.add_argument("--max-seconds", type=float, default=0, help="stop after S seconds of wall")
    ap.add_argument("--only", default="", help="only entries whose kname starts with this")
    ap.add_argument("--dry-run", action="store_true", help="print what would run; no torch")
    ap.add_argument("--from-result", help="only write --md from an existing RESULT.json")
    ap.add_argument("--db-out", help="with DB.json and --from-result: write the framework's "
                                     "times as a kernel database here")
    ap.add_argument("--db-add", help="with DB.json and --from-result: add the entries PyTorch "
                                     "timed to this framework database")
    ap.add_argument("--resume", action="store_true",
                    help="keep the PyTorch times already in --out (same key, timed without error) "
                         "and time only the other entries")
    a = ap.parse_args(argv)
    if a.from_result:
        if not a.md and not a.db_out and not a.db_add:
            ap.error("--from-result needs --md, --db-out or --db-add")
        with open(a.from_result) as f:
            result = json.load(f)
        if a.md and a.db and not a.db_out and not a.db_add:  # the table against its times
            with open(a.db) as f:
                cur = {e["key"]: e for e in json.load(f).get("entries", [])}
            rows = []
            for r in result.get("entries", []):
                if r.get("key") in cur:
                    r = dict(r, dlsim_s=cur[r["key"]]["median_s"])
                    if r.get("torch_s"):
                        r["ratio"] = r["dlsim_s"] / max(r["torch_s"], 1e-9)
                    rows.append(r)
            result = dict(result, entries=rows)
            result["provenance"] = dict(result.get("provenance", {}), db=os.path.basename(a.db))
        if a.md:
            write_atomic(a.md, markdown(result))
        if a.db_out:
            if not a.db:
                ap.error("--db-out needs DB.json")
            with open(a.db) as f:
                out, n = framework_db(json.load(f), result)
            write_atomic(a.db_out, json.dumps(out, indent=1) + "\n")
            log(f"torch_compare: {n} of {len(out['entries'])} entries with PyTorch's times "
                f"-> {a.db_out}")
        if a.db_add:
            if not a.db:
                ap.error("--db-add needs DB.json")
            with open(a.db) as f:
                sub, _ = framework_db(json.load(f), result)
            with open(a.db_add) as f:
                into = json.load(f)
            timed = {r["key"] for r in result.get("entries", []) if r.get("torch_s")
                     and not r.get("error")}
            add = {e["key"]: e for e in sub["entries"] if e["key"] in timed}
            have = {e["key"] for e in into["entries"]}
            into["entries"] = [add.get(e["key"], e) for e in into["entries"]] + \
                [e for k, e in add.items() if k not in have]
            rp = result.get("provenance", {})
            if "framework_entries" in into["provenance"]:  # keys it held were timed already
                into["provenance"]["framework_entries"] += len(add.keys() - have)
            date, k = str(rp.get("date", ""))[:10], 1
            while f"added_{date}" + (f"_{k}" if k > 1 else "") in into["provenance"]:
                k += 1
            into["provenance"][f"added_{date}" + (f"_{k}" if k > 1 else "")] = (
                f"{len(add)} entries ({len(add.keys() - have)} new keys) timed by "
                f"kernels/torch_compare.py on {rp.get('gpu')} (PyTorch {rp.get('torch')}, CUDA "
                f"{rp.get('cuda')}, cuDNN {rp.get('cudnn')}) at the keys of the entries of "
                f"{os.path.basename(a.db)}, measured by dlsim kbench just before")
            write_atomic(a.db_add, json.dumps(into, indent=1) + "\n")
            log(f"torch_compare: {len(add)} entries added to {a.db_add}")
        return 0
    if not a.db or not (a.out or a.dry_run):
        ap.error("DB.json and --out are required (--out is optional with --dry-run)")
    with open(a.db) as f:
        db = json.load(f)
    dbp = db.get("provenance", {})
    todo = [e for e in db.get("entries", []) if str(e.get("kname", "")).startswith(a.only)]
    todo = todo[:a.limit] if a.limit > 0 else todo
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    res = {"provenance": {"db": os.path.basename(a.db), "db_device": dbp.get("device"),
                          "db_date": dbp.get("date"), "db_backend": dbp.get("backend"),
                          "date": now, "dry_run": a.dry_run, "only": a.only, "limit": a.limit},
           "entries": []}
    kept = {}
    if a.resume and a.out and os.path.exists(a.out):
        with open(a.out) as f:
            kept = {r["key"]: r for r in json.load(f).get("entries", [])
                    if r.get("torch_s") and not r.get("error")}
    torch, flush, state = None, None, {}
    t0 = time.monotonic()

    def save():
        if a.out:
            write_atomic(a.out, json.dumps(res, indent=1) + "\n")
        if a.md:
            write_atomic(a.md, markdown(res))

    if not a.dry_run:
        try:
            torch, flush, prov = torch_env()
            res["provenance"].update(prov)
        except BaseException as ex:  # no torch, no GPU: said in the result, nothing timed
            res["error"] = f"torch setup: {type(ex).__name__}: {ex}"
            save()
            log(res["error"])
            return 1

    log(f"torch_compare: {len(todo)} entries of {a.db}")
    for i, e in enumerate(todo):
        if a.max_seconds and time.monotonic() - t0 > a.max_seconds and e.get("key") not in kept:
            if "stopped" not in res:
                res["stopped"] = f"--max-seconds {a.max_seconds:g} after {i} entries"
                log(res["stopped"])
            continue
        if e.get("key") in kept:
            r = dict(kept[e["key"]])
            r["dlsim_s"] = e.get("median_s")
            r["ratio"] = r["dlsim_s"] / max(r["torch_s"], 1e-9) if r["dlsim_s"] else None
            res["entries"].append(r)
            continue
        d, at = plan(e), f"[{i + 1}/{len(todo)}] {time.monotonic() - t0:7.1f} s"
        r = {"key": e.get("key"), "kname": e.get("kname"), "precision": e.get("precision"),
             "dlsim_s": e.get("median_s"), "torch_s": None, "ratio": None, "note": "",
             "error": None}
        res["entries"].append(r)
        if "skip" in d:
            r["skipped"] = d["skip"]
            log(f"{at} skip {r['key']}: {d['skip']}")
        elif a.dry_run:
            r["torch_op"] = d["desc"]
            log(f"{at} {r['key']}\n    -> {d['desc']} [{d['prec']}]")
        else:
            r["torch_op"] = d["desc"]
            torch.manual_seed(i)
            measure(torch, flush, state, e, d, r)
            log(f"{at} {r['key']}: dlsim {r['dlsim_s'] * 1e3:.4f} ms, torch "
                + (f"{r['torch_s'] * 1e3:.4f} ms, ratio {r['ratio']:.2f}" if r["torch_s"] else
                   f"- ERROR {r['error']}"))
        save()
    save()
    log(f"torch_compare: done in {time.monotonic() - t0:.1f} s"
        + (f", wrote {a.out}" if a.out else "") + (f" and {a.md}" if a.md else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
