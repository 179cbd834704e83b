#!/usr/bin/python3
"""What a kernel sum misses, measured on this machine's GPU through PyTorch: the host's cost of
launching a kernel, the L2 cache (its size and bandwidth, and kernels timed cold against warm),
and the GEMM efficiency by shape.

  tests/validation/torch_micro.py --out MICRO.json [--sections "launch l2 warm gemm"]

launch: the host time per operation of PyTorch's eager mode, from N back-to-back operations on
        one-element tensors (the GPU finishes each in a few microseconds, so the host's dispatch and
        the driver's launch set the pace): a bare op (torch.add with out=), an op that records
        autograd history, a linear layer's forward and backward; and the same N kernels replayed
        as one CUDA graph (the per-kernel cost that remains with --cuda-graphs).
dispatch: the host time per layer of eager training by layer kind (conv2d, batchnorm, relu,
        add, maxpool, linear, layernorm, gelu, dropout, attention), forward and backward, in fp32
        and under bf16 autocast, from models of 8 and 40 identical layers on tiny tensors (the
        slope: an iteration's fixed costs drop out); and the optimizer step's host time per
        parameter tensor (SGD foreach, AdamW fused).
l2:     the L2 size PyTorch reports, and the read bandwidth of x.sum() over buffers of 1 MiB to
        1 GiB, each timed cold (L2 flushed by zeroing twice its size) and warm (the same buffer
        read just before): buffers that fit in L2 are read from it when warm.
warm:   kernels timed cold (input written by a copy kernel, then L2 flushed, as kbench times
        them) and warm (L2 flushed, then the input written, as in training): ReLU, LayerNorm, GELU, a linear layer's GEMM and a
        3x3 convolution at shapes of the validation's workloads, in fp32 and bf16.
gemm:   TFLOP/s of torch.matmul (M x K) @ (K x N) over a grid of shapes in bf16, fp16, tf32 and
        fp32, each the median of CUDA-event timings after warm-ups, cold (L2 flushed).

Each section is timed with CUDA events, medians of repeats; the JSON is rewritten after every
section, and a section that fails records its error and the next one runs.
"""
import argparse
import datetime
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_iter import log, write_atomic  # noqa: E402


class Timer:
    def __init__(self, torch):
        self.torch = torch
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush_buf = torch.empty(max(2 * l2, 1 << 20), dtype=torch.uint8, device="cuda")

    def flush(self):
        self.flush_buf.zero_()

    def time(self, fn, pre=None, cold=False, reps=30, warm=3, flush_first=False):
        """Median seconds of fn() between CUDA events; pre() runs before each, untimed. cold:
        L2 flushed right before fn (after pre); flush_first: flushed before pre (so pre's output
        is what L2 holds). A sleep kernel first keeps the GPU busy while the host queues the rest,
        so no launch gap falls between the events."""
        torch = self.torch
        for _ in range(warm):
            if pre:
                pre()
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            torch.cuda._sleep(200000)  # about 0.1 ms at 2 GHz
            if flush_first:
                self.flush()
            if pre:
                pre()
            if cold:
                self.flush()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / 1e3)
        return statistics.median(ts)


def per_call(torch, fn, n, warm):
    """Seconds per call of fn() over n calls after `warm` untimed ones: (the host's, the time to
    the GPU's end of them)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    return host / n, (time.perf_counter() - t0) / n


def launch(torch, T):
    N = 20000
    a = torch.ones(1, device="cuda")
    b = torch.ones(1, device="cuda")
    c = torch.empty(1, device="cuda")
    w = torch.ones(1, requires_grad=True, device="cuda")
    lin = torch.nn.Linear(16, 16, device="cuda")
    x = torch.randn(1, 16, device="cuda")
    res = {}

    def per_op(body, n):
        return per_call(torch, body, n, 200)

    res["add_out"] = dict(zip(("host_s", "wall_s"), per_op(lambda: torch.add(a, b, out=c), N)))
    res["mul_autograd"] = dict(zip(("host_s", "wall_s"), per_op(lambda: w * a, N)))

    def lin_fb():
        lin(x).sum().backward()
    # kernels per call of lin_fb, counted by the profiler
    kern = None
    try:
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                lin_fb()
            torch.cuda.synchronize()
        kern = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) / 10
    except Exception as ex:
        res["profiler_error"] = f"{type(ex).__name__}: {ex}"
    h, wl = per_op(lin_fb, 2000)
    res["linear_fwd_bwd"] = {"host_s": h, "wall_s": wl, "kernels": kern,
                             "host_per_kernel_s": h / kern if kern else None}
    # the same tiny kernels as one CUDA graph
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    G = 1000
    with torch.cuda.stream(s):
        for _ in range(3):
            torch.add(a, b, out=c)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(G):
            torch.add(a, b, out=c)
    g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    res["graph_add_per_kernel_s"] = (time.perf_counter() - t0) / (10 * G)
    # the GPU's own time for one such kernel, back to back in a stream (events around 1000)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    e0.record()
    g.replay()
    e1.record()
    e1.synchronize()
    res["graph_add_gpu_per_kernel_s"] = e0.elapsed_time(e1) / 1e3 / G
    return res


def l2(torch, T):
    p = torch.cuda.get_device_properties(0)
    res = {"l2_bytes": p.L2_cache_size, "sm_count": p.multi_processor_count, "reads": []}
    for mib in (1, 2, 4, 8, 16, 24, 32, 40, 48, 64, 128, 256, 1024):
        x = torch.ones(mib << 18, device="cuda")  # fp32: 2^18 floats per MiB
        fn = lambda: x.sum()  # noqa: E731
        cold = T.time(fn, cold=True, reps=20)
        warm = T.time(fn, pre=fn, reps=20)
        nb = x.numel() * 4
        res["reads"].append({"bytes": nb, "cold_s": cold, "warm_s": warm,
                             "cold_GBps": nb / cold / 1e9, "warm_GBps": nb / warm / 1e9})
        del x
    return res


def warm(torch, T):
    F = torch.nn.functional
    res = []
    cases = []
    for dt in (torch.float32, torch.bfloat16):
        for (n, t, c) in ((4, 2048, 2304), (1, 2048, 2304), (8, 1024, 1024)):
            cases.append(("relu", dt, (n * t, c), lambda x: F.relu(x)))
            cases.append(("gelu", dt, (n * t, c), lambda x: F.gelu(x, approximate="tanh")))
            ln = torch.nn.LayerNorm(c, device="cuda", dtype=dt)
            cases.append(("layernorm", dt, (n * t, c), ln))
            wt = torch.randn(3 * c, c, device="cuda", dtype=dt)
            cases.append(("linear_qkv", dt, (n * t, c), lambda x, wt=wt: F.linear(x, wt)))
        for (n, ch, hw) in ((128, 64, 32), (64, 64, 56), (64, 256, 14), (128, 256, 8)):
            wc = torch.randn(ch, ch, 3, 3, device="cuda", dtype=dt)
            cases.append(("conv3x3", dt, (n, ch, hw, hw),
                          lambda x, wc=wc: F.conv2d(x, wc, padding=1)))
            cases.append(("relu4d", dt, (n, ch, hw, hw), lambda x: F.relu(x)))
    torch.backends.cudnn.benchmark = True
    for name, dt, shape, f in cases:
        x = torch.randn(*shape, device="cuda", dtype=dt)
        src = torch.randn(*shape, device="cuda", dtype=dt)
        with torch.no_grad():
            fn = lambda: f(x)  # noqa: E731
            prod = lambda: x.copy_(src)  # noqa: E731
            # cold: x written, then evicted; warm: everything evicted, then x written
            cold = T.time(fn, pre=prod, cold=True)
            w = T.time(fn, pre=prod, flush_first=True)
        res.append({"kernel": name, "dtype": str(dt).replace("torch.", ""), "shape": list(shape),
                    "input_bytes": x.numel() * x.element_size(), "cold_s": cold, "warm_s": w,
                    "warm_over_cold": w / cold})
    return res


def dispatch(torch, T):
    """Host time per layer of PyTorch eager training, by layer kind: models of L identical
    layers on tiny tensors (the GPU idles, the host sets the pace), forward with autograd
    recording, then forward + backward; per layer = the slope between L = 8 and L = 40, so the
    fixed costs of an iteration (zero_grad, backward's start, the loss) drop out. fp32 and under
    bf16 autocast. Then the optimizer step's host time per parameter tensor."""
    nn, F = torch.nn, torch.nn.functional

    class Seq(nn.Module):
        def __init__(self, make, L):
            super().__init__()
            self.mods = nn.ModuleList(make() for _ in range(L))

        def forward(self, x):
            for m in self.mods:
                x = m(x)
            return x

    class Lam(nn.Module):
        def __init__(self, f, shape=None):
            super().__init__()
            self.f = f
            self.p = nn.Parameter(torch.randn(*shape, device="cuda")) if shape else None

        def forward(self, x):
            return self.f(x, self.p) if self.p is not None else self.f(x)

    img, seq = (2, 8, 8, 8), (2, 8, 16)
    kinds = {
        "conv2d": (img, lambda: nn.Conv2d(8, 8, 3, padding=1, bias=False, device="cuda")),
        "batchnorm": (img, lambda: nn.BatchNorm2d(8, device="cuda")),
        "relu": (img, lambda: Lam(F.relu)),
        "add": (img, lambda: Lam(lambda x, p: x + p, img)),
        "maxpool": (img, lambda: Lam(lambda x: F.max_pool2d(x, 3, 1, 1))),
        "linear": (seq, lambda: nn.Linear(16, 16, device="cuda")),
        "layernorm": (seq, lambda: nn.LayerNorm(16, device="cuda")),
        "gelu": (seq, lambda: Lam(lambda x: F.gelu(x, approximate="tanh"))),
        "dropout": (seq, lambda: nn.Dropout(0.5)),
        "attention": (seq, lambda: Lam(lambda x: F.scaled_dot_product_attention(
            x.unsqueeze(1), x.unsqueeze(1), x.unsqueeze(1), is_causal=True).squeeze(1))),
    }
    res = {"layers": {}, "optimizer": {}}

    def host_per_iter(net, shape, amp, bwd, n=60):
        x = torch.randn(*shape, device="cuda", requires_grad=True)

        def it():
            for p in net.parameters():
                p.grad = None
            x.grad = None
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                y = net(x)
            loss = y.float().sum()
            if bwd:
                loss.backward()
        return per_call(torch, it, n, 5)[1]

    for kind, (shape, make) in kinds.items():
        for amp in (False, True):
            r = {}
            for bwd in (False, True):
                t = {L: host_per_iter(Seq(make, L).train(), shape, amp, bwd) for L in (8, 40)}
                r["fwd_bwd_s" if bwd else "fwd_s"] = (t[40] - t[8]) / 32
            r["bwd_s"] = r["fwd_bwd_s"] - r["fwd_s"]
            res["layers"][f"{kind} {'bf16' if amp else 'fp32'}"] = r
    for name, mk in (("sgd_foreach", lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9,
                                                               foreach=True)),
                     ("adamw_fused", lambda ps: torch.optim.AdamW(ps, lr=1e-3, fused=True))):
        t = {}
        for P in (16, 256):
            ps = [nn.Parameter(torch.randn(64, device="cuda")) for _ in range(P)]
            for p in ps:
                p.grad = torch.randn_like(p)
            opt = mk(ps)
            t[P] = per_call(torch, opt.step, 50, 5)[1]
        res["optimizer"][name] = {"per_tensor_s": (t[256] - t[16]) / 240,
                                  "fixed_s": t[16] - 16 * (t[256] - t[16]) / 240}
    return res


def gemm(torch, T):
    res = []
    torch.backends.cuda.matmul.allow_tf32 = False
    Ms = (256, 1024, 4096, 16384)
    NK = ((768, 768), (1024, 1024), (2304, 2304), (2304, 9216), (9216, 2304), (3072, 3072),
          (4096, 4096), (4096, 14336), (8192, 8192), (12288, 12288))
    for prec in ("bf16", "fp16", "tf32", "fp32"):
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec, torch.float32)
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        for M in Ms:
            for (N, K) in NK:
                if prec in ("fp32", "tf32") and M * max(N, K) > 16384 * 8192 and M > 4096:
                    continue
                a = torch.randn(M, K, device="cuda", dtype=dt)
                b = torch.randn(K, N, device="cuda", dtype=dt)
                t = T.time(lambda: torch.matmul(a, b), cold=True, reps=10)
                res.append({"precision": prec, "M": M, "N": N, "K": K, "s": t,
                            "tflops": 2 * M * N * K / t / 1e12})
                del a, b
    torch.backends.cuda.matmul.allow_tf32 = False
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sections", default="launch dispatch l2 warm gemm")
    a = ap.parse_args(argv)
    import torch
    p = torch.cuda.get_device_properties(0)
    res = {"provenance": {"date": datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "sm_count": p.multi_processor_count, "l2_bytes": p.L2_cache_size,
        "memory_bytes": p.total_memory}}
    T = Timer(torch)
    for sec in a.sections.split():
        t0 = time.time()
        try:
            res[sec] = {"launch": launch, "dispatch": dispatch, "l2": l2, "warm": warm,
                        "gemm": gemm}[sec](torch, T)
        except Exception as ex:
            res[sec] = {"error": f"{type(ex).__name__}: {ex}"}
        res.setdefault("wall_s", {})[sec] = time.time() - t0
        log(f"{sec}: {time.time() - t0:.1f} s")
        write_atomic(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
