#!/usr/bin/python3
"""Real single-GPU PyTorch training iterations of a dlsim workload (workloads/NAME.json), to set
beside dlsim's predicted iteration time.

  tests/validation/torch_iter.py --workload workloads/gpt-tiny.json --batch 8 --precision bf16 \
      [--iters 20 --warmup 5] [--channels-last] [--no-fallback] --out RESULT.json
  tests/validation/torch_iter.py --workload resnet50-imagenet --batch 256 --dry-run \
      [--check-against DLSIM.json]     # no torch: layers, shapes, parameter count

The model is built from the workload's layer graph with sim/model/workload.c's defaults (conv
stride 1, padding 0, groups 1, bias true; linear bias true, on the channel axis; pool stride =
kernel; lrn size 5; dropout p 0.5; an embedding whose vocab is the sequence length and not the
model's is a position table; a linear tied_to an embedding uses its table; attention reads the
fused QKV (N, T, 3C) and runs F.scaled_dot_product_attention(is_causal=True); moe is a router
linear, softmax, top-k, dlsim's capacity ceil(cf*k*M/E) with every token's first choice first,
per-expert linear-GELU-linear on the routed tokens, gated sum, one host sync per layer;
softmax_ce is the cross-entropy loss; relu runs in place on a conv/batchnorm/add/linear output
that nothing else reads, as torchvision's models do). Weights: PyTorch's default
initialisation, embeddings N(0, 0.02) as GPT-2's. Parameters are counted as dlsim counts them
and checked against the torch model. --check-against takes `build/dlsim workload NAME --json`
output and compares every layer's output shape and parameters with this script's.

Optimizer as dlsim's real mode: sgd = SGD(lr 0.01, momentum 0.9, foreach), adam = AdamW(lr 1e-3,
betas 0.9/0.999, eps 1e-8, weight decay 0, fused). Precision: fp32/tf32 = float32 with TF32 off/on
(cuBLAS and cuDNN); fp16/bf16 = torch.autocast with float32 master weights (fp16 with a
GradScaler). cudnn.benchmark is on; eager mode (no torch.compile). Random inputs of the
workload's shape (images N×C×H×W, or token ids < vocab) and targets < classes, the same batch
every iteration. Each iteration is timed with CUDA events around forward+loss, backward and the
optimizer step; the JSON has median/mean/min per iteration and per phase, parameter counts, peak
memory and the losses. Out of memory: the error goes into the JSON and, unless --no-fallback, the
batch is halved and tried again (every attempt is recorded).
"""
import argparse
import datetime
import gc
import json
import math
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def write_atomic(path, obj):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def load_workload(arg):
    path = arg if os.path.isfile(arg) else os.path.join(ROOT, "workloads", arg + (
        "" if arg.endswith(".json") else ".json"))
    with open(path) as f:
        return json.load(f), path


def build_layers(wl):
    """The layer list with shapes (c, h, w per sample), hyper-parameters and dlsim's parameter
    count, as sim/model/workload.c derives them. Also the rank of each torch activation."""
    inp = wl["input"]
    seq = "seq_len" in inp
    in_shape = (1, inp["seq_len"], 1) if seq else (inp["c"], inp["h"], inp["w"])
    names, layers = {}, []
    for i, j in enumerate(wl["layers"]):
        t = j["type"]
        refs = j["inputs"] if t == "add" else [j.get("input", layers[-1]["name"] if i else "input")]
        ins = [-1 if r == "input" else names[r] for r in refs]
        c, h, w = in_shape if ins[0] < 0 else layers[ins[0]]["out"]
        rank = (2 if seq else 4) if ins[0] < 0 else layers[ins[0]]["rank"]
        L = {"name": j["name"], "type": t, "inputs": ins, "in": (c, h, w), "params": 0}
        oc, oh, ow = c, h, w
        if t == "conv2d":
            L.update(k=j["kernel"], stride=j.get("stride", 1), pad=j.get("padding", 0),
                     groups=j.get("groups", 1), bias=j.get("bias", True))
            oc = j["out_channels"]
            oh, ow = ((n + 2 * L["pad"] - L["k"]) // L["stride"] + 1 for n in (h, w))
            L["params"] = oc * (c // L["groups"]) * L["k"] ** 2 + (oc if L["bias"] else 0)
        elif t in ("maxpool", "avgpool"):
            if j.get("global"):
                L.update(k=(h, w), stride=1, pad=0, glob=True)
            else:
                L.update(k=(j["kernel"],) * 2, stride=j.get("stride", j["kernel"]),
                         pad=j.get("padding", 0), glob=False)
            oh, ow = ((n + 2 * L["pad"] - k) // L["stride"] + 1 for n, k in zip((h, w), L["k"]))
        elif t == "linear":
            oc, L["bias"] = j["out_features"], j.get("bias", True)
            L["tied"] = names[j["tied_to"]] if "tied_to" in j else None
            L["params"] = (0 if L["tied"] is not None else c * oc) + (oc if L["bias"] else 0)
        elif t in ("batchnorm", "layernorm"):
            L["params"] = 2 * c
        elif t == "rmsnorm":
            L["params"] = c
        elif t == "swiglu":
            oc = c // 2
        elif t == "rope":
            L.update(heads=j["heads"], kv=j.get("kv_heads", j["heads"]),
                     theta=j.get("theta", 10000.0))
        elif t == "embedding":
            oc, L["vocab"] = j["out_features"], j["vocab"]
            L["positions"] = j["vocab"] != inp.get("vocab") and j["vocab"] == h * w
            L["params"], rank = j["vocab"] * oc, 3
        elif t == "attention":  # grouped-query: in = (heads + 2 kv_heads) * head width
            L["heads"], L["kv"] = j["heads"], j.get("kv_heads", 0)
            oc = c // 3 if not L["kv"] else c // (L["heads"] + 2 * L["kv"]) * L["heads"]
        elif t == "moe":
            L.update(E=j["experts"], K=j["top_k"], ffn=j["ffn"], bias=j.get("bias", False),
                     cf=j.get("capacity_factor", 1.0))
            L["params"] = L["E"] * (2 * c * L["ffn"] + L["ffn"] + c) + c * L["E"] + (
                L["E"] if L["bias"] else 0)
        elif t == "flatten":
            oc, oh, ow, rank = c * h * w, 1, 1, 2
        elif t == "lrn":
            L["size"] = j.get("size", 5)
        elif t == "dropout":
            L["p"] = j.get("p", 0.5)
        L["out"], L["rank"] = (oc, oh, ow), rank
        names[j["name"]] = i
        layers.append(L)
    return layers, {"seq": seq, "input": in_shape, "vocab": inp.get("vocab", 0)}


def torch_shape(L, n):
    c, h, w = L["out"]
    return {2: (n, c), 3: (n, h * w, c), 4: (n, c, h, w)}[L["rank"]]


def dry_run(a, wl, layers, expected):
    log(f"{wl['name']}: {len(layers)} layers, batch {a.batch}, optimizer {wl['optimizer']}")
    for i, L in enumerate(layers):
        ins = ",".join("input" if k < 0 else layers[k]["name"] for k in L["inputs"])
        print(f"{i:4d} {L['name']:<22} {L['type']:<10} {'x'.join(map(str, L['out'])):>14} "
              f"{str(torch_shape(L, a.batch)):>24} {L['params']:>14,}  <- {ins}")
    amp = a.precision in ("fp16", "bf16")
    words = 8 + (8 if wl["optimizer"] == "adam" else 4) + (2 if amp else 0)
    print(f"total params (dlsim's count): {expected:,}; fp32 weights, grads, {wl['optimizer']} "
          f"state{' and half copies' if amp else ''}: {expected * words / 2 ** 30:.1f} GiB "
          f"before activations")
    bad = 0
    if a.check_against:
        with open(a.check_against) as f:
            ref = json.load(f)
        for L, R in zip(layers, ref.get("layers", [])):
            if tuple(R["out"]) != L["out"] or R["params"] != L["params"] or R["name"] != L["name"]:
                bad += 1
                print(f"MISMATCH {L['name']}: out {L['out']} vs {R['out']}, params "
                      f"{L['params']} vs {R['params']}")
        bad += (len(ref.get("layers", [])) != len(layers)) + (ref.get("params") != expected)
        print(f"dlsim says {ref.get('params'):,} params in {len(ref.get('layers', []))} layers; "
              f"{'all layers agree' if not bad else f'{bad} mismatches'}")
    return 1 if bad else 0


# ---- torch part: nothing above this line imports torch -------------------------------------

def build_model(torch, layers, meta, relu_inplace=True):
    nn, F = torch.nn, torch.nn.functional
    consumers = [0] * len(layers)
    for L in layers:
        for k in L["inputs"]:
            if k >= 0:
                consumers[k] += 1

    def on_channels(x, f):  # a per-channel op on NCHW applies to the channel axis
        return f(x.movedim(1, -1)).movedim(-1, 1) if x.dim() == 4 else f(x)

    class MoE(nn.Module):
        def __init__(self, c, L):
            super().__init__()
            self.L, self.router = L, nn.Linear(c, L["E"], bias=L["bias"])
            self.w1 = nn.ModuleList(nn.Linear(c, L["ffn"]) for _ in range(L["E"]))
            self.w2 = nn.ModuleList(nn.Linear(L["ffn"], c) for _ in range(L["E"]))

        def forward(self, x):
            shp, E, K = x.shape, self.L["E"], self.L["K"]
            x = x.reshape(-1, shp[-1])
            M = x.shape[0]
            cap = min(M, max(1, math.ceil(self.L["cf"] * K * M / E - 1e-9)))
            probs = torch.softmax(self.router(x).float(), dim=-1)
            flat = probs.topk(K, dim=-1)[1].t().reshape(-1)  # 1st choices first, then 2nd...
            order = torch.argsort(flat, stable=True)
            counts = torch.bincount(flat, minlength=E).tolist()  # one host sync per layer
            out, start = None, 0
            for e in range(E):
                sel, start = order[start:start + min(counts[e], cap)], start + counts[e]
                if sel.numel() == 0:
                    continue
                tok = sel % M
                y = self.w2[e](F.gelu(self.w1[e](x.index_select(0, tok)), approximate="tanh"))
                y = y * probs[tok, e].unsqueeze(1).to(y.dtype)
                out = (torch.zeros(M, shp[-1], device=x.device, dtype=y.dtype) if out is None
                       else out).index_add_(0, tok, y)
            return (out if out is not None else torch.zeros_like(x)).reshape(shp)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.mods, self.fns, self.by_layer = nn.ModuleList(), [], {}
            for i, L in enumerate(layers):
                n0 = len(self.mods)
                self.fns.append(self.make(i, L))
                if len(self.mods) > n0:  # the module holding layer i's weights
                    self.by_layer[i] = self.mods[n0]
            self.last_use = {k: i for i, L in enumerate(layers) for k in L["inputs"]}

        def add(self, m):
            self.mods.append(m)
            return m

        def make(self, i, L):
            t, c = L["type"], L["in"][0]
            if t == "conv2d":
                return self.add(nn.Conv2d(c, L["out"][0], L["k"], L["stride"], L["pad"],
                                          groups=L["groups"], bias=L["bias"]))
            if t == "linear":
                if L["tied"] is None:
                    m = self.add(nn.Linear(c, L["out"][0], bias=L["bias"]))
                    return lambda x: on_channels(x, m)
                tied, hold = self.by_layer[L["tied"]], self.add(nn.Module())
                hold.bias = nn.Parameter(torch.zeros(L["out"][0])) if L["bias"] else None
                return lambda x: on_channels(x, lambda v: F.linear(v, tied.weight, hold.bias))
            if t == "batchnorm":
                m = self.add((nn.BatchNorm2d if layers[i]["rank"] == 4 else nn.BatchNorm1d)(c))
                if layers[i]["rank"] == 3:  # (N, T, C): channels on the last axis
                    return lambda x: m(x.transpose(1, 2)).transpose(1, 2)
                return m
            if t == "layernorm":
                m = self.add(nn.LayerNorm(c))
                return lambda x: on_channels(x, m)
            if t == "relu":
                j = L["inputs"][0]
                inplace = relu_inplace and j >= 0 and consumers[j] == 1 and layers[j]["type"] in (
                    "conv2d", "batchnorm", "add", "linear")
                return lambda x: F.relu(x, inplace=inplace)
            if t == "gelu":
                return lambda x: F.gelu(x, approximate="tanh")
            if t == "dropout":
                return lambda x: F.dropout(x, L["p"], training=True)
            if t == "maxpool":
                return nn.MaxPool2d(L["k"], L["stride"], L["pad"])
            if t == "avgpool":
                return nn.AdaptiveAvgPool2d(1) if L["glob"] else nn.AvgPool2d(L["k"], L["stride"],
                                                                               L["pad"])
            if t == "lrn":
                return nn.LocalResponseNorm(L["size"], 1e-4, 0.75, 2.0)
            if t == "flatten":
                return lambda x: torch.flatten(x, 1)
            if t == "add":
                return lambda a, b: a + b
            if t == "embedding":
                m = self.add(nn.Embedding(L["vocab"], L["out"][0]))
                nn.init.normal_(m.weight, std=0.02)  # GPT-2's init: sane logits when tied
                if L["positions"]:
                    return lambda tok: m(torch.arange(tok.shape[1], device=tok.device)).expand(
                        tok.shape[0], -1, -1)
                return m
            if t == "attention":
                C, NH, KV = L["out"][0], L["heads"], L["kv"]

                def attn(qkv):
                    N, T = qkv.shape[0], qkv.shape[1]
                    if not KV:
                        q, k, v = (u.view(N, T, NH, C // NH).transpose(1, 2)
                                   for u in qkv.split(C, 2))
                        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    else:  # Megatron-Core's grouped QKV: per K/V head, its queries, k, v
                        r = NH // KV
                        g = qkv.view(N, T, KV, r + 2, C // NH)
                        q = g[:, :, :, :r].reshape(N, T, NH, C // NH).transpose(1, 2)
                        y = F.scaled_dot_product_attention(
                            q, g[:, :, :, r].transpose(1, 2), g[:, :, :, r + 1].transpose(1, 2),
                            is_causal=True, enable_gqa=True)
                    return y.transpose(1, 2).reshape(N, T, C)
                return attn
            if t == "rmsnorm":
                m = self.add(nn.RMSNorm(c, eps=1e-5))
                return lambda x: on_channels(x, m)
            if t == "swiglu":
                def swiglu(x):
                    a, b = x.chunk(2, -1)
                    return F.silu(a) * b
                return swiglu
            if t == "rope":  # rotate-half on the q and k slots; angles cached per length
                NH, KV, th, cache = L["heads"], L["kv"], float(L["theta"]), {}
                r, hs = NH // KV, c // (NH + 2 * KV)

                def rope(x):
                    N, T, half = x.shape[0], x.shape[1], hs // 2
                    key = (T, x.dtype, x.device)
                    if key not in cache:
                        j = torch.arange(half, device=x.device, dtype=torch.float64)
                        a = torch.arange(T, device=x.device, dtype=torch.float64)[:, None] * \
                            torch.pow(th, -2.0 * j / hs)[None, :]
                        cache[key] = [torch.cat([f, f], 1).to(x.dtype)[:, None, None, :]
                                      for f in (a.cos(), a.sin())]
                    cos, sin = cache[key]
                    g = x.view(N, T, KV, r + 2, hs)
                    qk = g[:, :, :, :r + 1]
                    turned = torch.cat([-qk[..., half:], qk[..., :half]], -1)
                    return torch.cat([qk * cos + turned * sin, g[:, :, :, r + 1:]],
                                     3).reshape(N, T, -1)
                return rope
            if t == "moe":
                return self.add(MoE(c, L))
            if t == "softmax_ce":
                return lambda x, tgt: F.cross_entropy(on_channels(x, lambda v: v).reshape(-1, c),
                                                      tgt)
            raise ValueError(f"layer {L['name']}: no torch mapping for type {t!r}")

        def forward(self, x, tgt):
            outs, last = [None] * len(layers), self.last_use
            for i, (L, f) in enumerate(zip(layers, self.fns)):
                ins = [x if k < 0 else outs[k] for k in L["inputs"]]
                outs[i] = f(ins[0], tgt) if L["type"] == "softmax_ce" else f(*ins)
                for k in L["inputs"]:
                    if k >= 0 and last[k] == i:
                        outs[k] = None
            return outs[-1]

    if layers[-1]["type"] != "softmax_ce":
        raise ValueError("the last layer must be the softmax_ce loss")
    return Net()


def set_tf32(torch, on):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.backends.cuda.matmul.allow_tf32 = on
            torch.backends.cudnn.allow_tf32 = on
            return f"allow_tf32={on}"
        except Exception as ex:  # legacy flags gone: the per-backend settings
            v = "tf32" if on else "ieee"
            torch.backends.cuda.matmul.fp32_precision = v
            torch.backends.cudnn.conv.fp32_precision = v
            return f"fp32_precision={v} (legacy flags: {ex})"


def stats(xs):
    return {"median": statistics.median(xs), "mean": sum(xs) / len(xs), "min": min(xs),
            "max": max(xs)}


def attempt(torch, a, wl, layers, meta, batch, res):
    """One training run at `batch`; fills res. Raises on failure (out of memory included)."""
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    with torch.device("cuda"):  # weights made and initialised on the GPU
        net = build_model(torch, layers, meta)
    mf = torch.channels_last if a.channels_last and not meta["seq"] else torch.contiguous_format
    net = net.to(memory_format=mf)
    res["params"]["torch"] = sum(p.numel() for p in net.parameters())
    res["params"]["match"] = res["params"]["torch"] == res["params"]["dlsim"]
    log(f"params: torch {res['params']['torch']:,}, dlsim {res['params']['dlsim']:,}"
        f"{'' if res['params']['match'] else '  MISMATCH'}")
    params = list(net.parameters())
    if wl["optimizer"] == "adam":
        try:
            opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                    weight_decay=0.0, fused=True)
        except Exception as ex:
            res["notes"].append(f"fused AdamW refused ({ex}); foreach AdamW")
            opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0, foreach=True)
    else:
        opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=0.0, foreach=True)
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)
    scaler = torch.amp.GradScaler("cuda") if a.precision == "fp16" else None
    c, h, w = meta["input"]
    x = (torch.randint(0, meta["vocab"], (batch, h), device="cuda") if meta["seq"] else
         torch.randn(batch, c, h, w, device="cuda").contiguous(memory_format=mf))
    lc, lh, lw = layers[-1]["in"]
    tgt = torch.randint(0, lc, (batch * lh * lw,), device="cuda")

    def step(ev):
        opt.zero_grad(set_to_none=True)
        ev[0].record()
        with torch.autocast("cuda", dtype=half or torch.float32, enabled=half is not None):
            loss = net(x, tgt)
        ev[1].record()
        (scaler.scale(loss) if scaler else loss).backward()
        ev[2].record()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        ev[3].record()
        return loss.detach()

    new = lambda: [torch.cuda.Event(enable_timing=True) for _ in range(4)]  # noqa: E731
    for i in range(a.warmup):
        step(new())
        torch.cuda.synchronize()
        log(f"warm-up {i + 1}/{a.warmup} done")
    scale0 = scaler.get_scale() if scaler else None
    evs = [new() for _ in range(a.iters)]
    t0 = time.perf_counter()
    losses = [step(ev) for ev in evs]
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    ms = lambda e, i, j: e[i].elapsed_time(e[j]) / 1e3  # noqa: E731
    it = [ms(e, 0, 3) for e in evs]
    res.update(batch=batch, iteration_s=stats(it), iterations_s=it,
               phase_s={"forward_loss": stats([ms(e, 0, 1) for e in evs]),
                        "backward": stats([ms(e, 1, 2) for e in evs]),
                        "optimizer": stats([ms(e, 2, 3) for e in evs])},
               wall_per_iter_s=wall / a.iters,
               samples_per_s=batch / statistics.median(it),
               tokens_per_s=batch * h / statistics.median(it) if meta["seq"] else None,
               peak_memory_bytes=torch.cuda.max_memory_allocated(),
               peak_reserved_bytes=torch.cuda.max_memory_reserved(),
               losses=[float(v) for v in losses])
    if a.count_kernels:  # the kernels one iteration launches, as the profiler sees them
        try:
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                step(new())
                torch.cuda.synchronize()
            cuda = torch.autograd.DeviceType.CUDA
            names = [e.name for e in prof.events() if e.device_type == cuda]
            res["kernels_per_iter"] = len(names)
            res["kernels_memcpy_memset"] = sum(1 for n in names if "Memcpy" in n or
                                               "Memset" in n)
        except Exception as ex:
            res["notes"].append(f"kernel count failed: {type(ex).__name__}: {ex}")
    if scaler:
        res["grad_scale"] = {"before_timing": scale0, "after": scaler.get_scale(),
                             "note": "a drop means steps were skipped (overflow) while timed"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", required=True, help="workloads/NAME.json, a path, or NAME")
    ap.add_argument("--batch", type=int, required=True, help="samples per iteration")
    ap.add_argument("--precision", choices=("fp32", "tf32", "fp16", "bf16"), default="fp32")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations")
    ap.add_argument("--warmup", type=int, default=5, help="untimed iterations first")
    ap.add_argument("--out", help="result JSON (rewritten as the run goes)")
    ap.add_argument("--channels-last", action="store_true", help="NHWC images and weights")
    ap.add_argument("--no-fallback", action="store_true", help="no halved batch after an OOM")
    ap.add_argument("--count-kernels", action="store_true",
                    help="also count the GPU kernels of one iteration (torch.profiler)")
    ap.add_argument("--dry-run", action="store_true", help="print the layers; no torch")
    ap.add_argument("--check-against", help="with --dry-run: `dlsim workload NAME --json` output")
    a = ap.parse_args(argv)
    if a.batch < 1 or a.iters < 1 or a.warmup < 0:
        ap.error("--batch and --iters must be >= 1, --warmup >= 0")
    wl, path = load_workload(a.workload)
    layers, meta = build_layers(wl)
    expected = sum(L["params"] for L in layers)
    if a.dry_run:
        return dry_run(a, wl, layers, expected)
    if not a.out:
        ap.error("--out is required (except with --dry-run)")
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    res = {"provenance": {"date": datetime.datetime.now(datetime.timezone.utc).strftime(
               "%Y-%m-%dT%H:%M:%SZ")},
           "config": {"workload": wl["name"], "file": os.path.relpath(path, ROOT),
                      "batch_requested": a.batch, "precision": a.precision, "iters": a.iters,
                      "warmup": a.warmup, "optimizer": wl["optimizer"],
                      "channels_last": a.channels_last, "fallback": not a.no_fallback},
           "params": {"dlsim": expected, "torch": None, "match": None},
           "batch": None, "attempts": [], "notes": [], "error": None}
    write_atomic(a.out, res)
    try:
        import torch
        torch.backends.cudnn.benchmark = True
        res["config"]["tf32"] = set_tf32(torch, a.precision == "tf32")
        res["config"]["amp"] = a.precision in ("fp16", "bf16")
        res["provenance"].update(gpu=torch.cuda.get_device_name(0), torch=torch.__version__,
                                 cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                                 memory_bytes=torch.cuda.get_device_properties(0).total_memory)
    except Exception as ex:
        res["error"] = f"torch setup: {type(ex).__name__}: {ex}"
        write_atomic(a.out, res)
        log(res["error"])
        return 1
    batch = a.batch
    while True:
        log(f"{wl['name']} batch {batch} {a.precision}: building and running")
        try:
            attempt(torch, a, wl, layers, meta, batch, res)
            res["attempts"].append({"batch": batch, "error": None})
            res["error"] = None
            break
        except Exception as ex:
            msg = f"{type(ex).__name__}: {str(ex)[:600]}"
            oom = "out of memory" in msg.lower()
            res["attempts"].append({"batch": batch, "error": msg, "peak_memory_bytes":
                                    torch.cuda.max_memory_allocated()})
            res["error"] = msg
            log(f"batch {batch} failed: {msg[:300]}")
        gc.collect()
        torch.cuda.empty_cache()
        write_atomic(a.out, res)
        if not oom or a.no_fallback or batch == 1:
            break
        batch //= 2
    write_atomic(a.out, res)
    if res.get("iteration_s"):
        log(f"{wl['name']} batch {res['batch']} {a.precision}: iteration median "
            f"{res['iteration_s']['median'] * 1e3:.2f} ms (fwd+loss "
            f"{res['phase_s']['forward_loss']['median'] * 1e3:.2f}, bwd "
            f"{res['phase_s']['backward']['median'] * 1e3:.2f}, opt "
            f"{res['phase_s']['optimizer']['median'] * 1e3:.2f}); peak "
            f"{res['peak_memory_bytes'] / 2 ** 30:.1f} GiB; wrote {a.out}")
    return 0 if res["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
