#!/usr/bin/env python3
"""Writes the decoder workloads of today: llama3-8b, llama3-70b, llama3-405b, llama-tiny,
mixtral-8x7b and deepseekmoe-16b.

Llama 3: "The Llama 3 Herd of Models" (Meta, 2024), Table 3, and the models' params.json
(vocabulary 128,256; RoPE theta 500,000; RMSNorm eps 1e-5; untied output layer). A block is
pre-RMSNorm grouped-query attention (fused QKV column-parallel in Megatron-Core's grouped layout,
rotary embedding, flash-style attention, output projection row-parallel) and a pre-RMSNorm SwiGLU
MLP (gate and up fused and interleaved, column-parallel; down projection row-parallel); no biases.
Mixtral 8x7B ("Mixtral of Experts", Jiang et al. 2024, and its config.json): the same block with
8 SwiGLU experts of 14,336, top-2, in place of the MLP; vocabulary 32,000, RoPE theta 1e6,
trained at 32K tokens. DeepSeekMoE 16B (Dai et al. 2024, and deepseek-moe-16b-base's config.json):
28 blocks of multi-head attention (16 heads), the first with a dense SwiGLU MLP of 10,944, the
others with 64 routed SwiGLU experts of 1,408 (top-6) and 2 shared ones; vocabulary 102,400,
sequence 4,096.

Usage: python3 workloads/make_decoders.py   (rewrites the six files next to this script)
"""
import json
import os

TOKENS = 15_000_000_000_000  # Llama 3 paper, section 3: "about 15T multilingual tokens"

MODELS = {
    # name: (layers, dim, ffn, heads, kv_heads, vocab, seq, batch, official parameter count)
    "llama3-8b": (32, 4096, 14336, 32, 8, 128256, 8192, 1024, "8.03B"),
    "llama3-70b": (80, 8192, 28672, 64, 8, 128256, 8192, 1024, "70.6B"),
    "llama3-405b": (126, 16384, 53248, 128, 8, 128256, 8192, 1024, "405.9B"),
    # numerics tests of the real executor: the same block at a size a CPU trains in a second
    "llama-tiny": (2, 64, 96, 8, 4, 256, 32, 8, None),
}


def layers(L, h, ffn, H, KV, V, theta=500000, moe=None):
    """moe: None, or (experts, top_k, expert ffn, shared experts, dense first layers)."""
    hs = h // H
    out = [{"name": "tok_embed", "type": "embedding", "input": "input", "vocab": V,
            "out_features": h, "block": "embed"}]
    prev = "tok_embed"
    for i in range(L):
        b = f"h{i}"
        out += [
            {"name": f"{b}.norm1", "type": "rmsnorm", "input": prev, "block": b},
            {"name": f"{b}.qkv", "type": "linear", "out_features": (H + 2 * KV) * hs,
             "bias": False, "tp": "column", "block": b},
            {"name": f"{b}.rope", "type": "rope", "heads": H, "kv_heads": KV, "theta": theta,
             "block": b},
            {"name": f"{b}.attn", "type": "attention", "heads": H, "kv_heads": KV,
             "flash": True, "block": b},
            {"name": f"{b}.proj", "type": "linear", "out_features": h, "bias": False,
             "tp": "row", "block": b},
            {"name": f"{b}.add1", "type": "add", "inputs": [f"{b}.proj", prev], "block": b},
            {"name": f"{b}.norm2", "type": "rmsnorm", "block": b},
        ]
        if moe and i >= moe[4]:
            E, k, f, shared, _ = moe
            m = {"name": f"{b}.moe", "type": "moe", "experts": E, "top_k": k, "ffn": f,
                 "activation": "swiglu", "capacity_factor": 0}
            if shared:
                m["shared_experts"] = shared
            m["block"] = b
            out += [m,
                    {"name": f"{b}.add2", "type": "add", "inputs": [f"{b}.moe", f"{b}.add1"],
                     "block": b}]
        else:
            out += [
                {"name": f"{b}.fc1", "type": "linear", "out_features": 2 * ffn, "bias": False,
                 "tp": "column", "block": b},
                {"name": f"{b}.swiglu", "type": "swiglu", "block": b},
                {"name": f"{b}.fc2", "type": "linear", "out_features": h, "bias": False,
                 "tp": "row", "block": b},
                {"name": f"{b}.add2", "type": "add", "inputs": [f"{b}.fc2", f"{b}.add1"],
                 "block": b},
            ]
        prev = f"{b}.add2"
    out += [{"name": "norm_f", "type": "rmsnorm", "input": prev},
            {"name": "lm_head", "type": "linear", "out_features": V, "bias": False},
            {"name": "loss", "type": "softmax_ce"}]
    return out


MOE_MODELS = {
    # name: (layers, dim, dense ffn, heads, kv_heads, vocab, seq, batch, theta,
    #        (experts, top_k, expert ffn, shared, dense first layers), count, description)
    "mixtral-8x7b": (32, 4096, 14336, 32, 8, 32000, 32768, 256, 1000000,
                     (8, 2, 14336, 0, 0), "46.7B total, 12.9B active",
                     "Mixtral 8x7B ('Mixtral of Experts', Jiang et al. 2024; config.json): h=4096, "
                     "l=32, 32 heads, 8 key/value heads, 8 SwiGLU experts of 14,336 with top-2 "
                     "routing in every layer (dropless: no capacity limit), V=32000, s=32768 (its "
                     "training context), RoPE theta 1e6, RMSNorm, untied output layer"),
    "deepseekmoe-16b": (28, 2048, 10944, 16, 16, 102400, 4096, 1024, 10000,
                        (64, 6, 1408, 2, 1), "16.4B total, 2.8B active",
                        "DeepSeekMoE 16B (Dai et al. 2024; deepseek-moe-16b-base config.json): "
                        "h=2048, l=28, 16 heads (multi-head attention), the first layer a dense "
                        "SwiGLU MLP of 10,944, the other 27 fine-grained MoE layers of 64 routed "
                        "SwiGLU experts of 1,408 (top-6, no capacity limit) and 2 shared experts, "
                        "V=102400, s=4096, RMSNorm, untied output layer"),
}


def write(here, doc):
    head = ",\n".join(f'  "{k}": {json.dumps(v)}' for k, v in doc.items() if k != "layers")
    body = ",\n".join("    " + json.dumps(l) for l in doc["layers"])
    with open(os.path.join(here, doc["name"] + ".json"), "w") as f:
        f.write("{\n" + head + ',\n  "layers": [\n' + body + "\n  ]\n}\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, (L, h, ffn, H, KV, V, s, batch, count) in MODELS.items():
        if count:
            desc = (f"Llama 3 {name.split('-')[1].upper()} ({count} parameters; 'The Llama 3 Herd "
                    f"of Models', Meta 2024, Table 3): h={h}, l={L}, {H} heads, {KV} key/value "
                    f"heads, SwiGLU FFN {ffn}, V={V}, s={s}, RoPE theta 500,000, RMSNorm, untied "
                    f"output layer, no biases; batch {batch} sequences = 8M tokens (the paper's "
                    f"405B batch at sequence 8,192, section 3.4.1); dataset: about 15T tokens "
                    f"(section 3) cut into sequences of {s} tokens")
            ds = {"name": "token-corpus-15t", "samples": -(-TOKENS // s)}
        else:
            desc = (f"A two-layer Llama-3-style model (h={h}, {H} heads, {KV} key/value heads, "
                    f"SwiGLU {ffn}, V={V}, s={s}) with the same block structure as llama3-8b, "
                    f"small enough for numerics tests of the real executor; synthetic tokens")
            ds = {"name": "synthetic-tokens", "samples": 4096}
        write(here, {"name": name, "description": desc, "dataset": ds,
                     "input": {"seq_len": s, "vocab": V}, "default_batch": batch,
                     "optimizer": "adam", "layers": layers(L, h, ffn, H, KV, V)})
    for name, (L, h, ffn, H, KV, V, s, batch, theta, moe, count, what) in MOE_MODELS.items():
        desc = (f"{what}; {count} parameters; batch {batch} sequences = {batch * s / 1e6:.0f}M "
                f"tokens (a nominal batch: the papers do not give one); dataset: a nominal "
                f"2-trillion-token corpus cut into sequences of {s} tokens")
        write(here, {"name": name, "description": desc,
                     "dataset": {"name": "token-corpus-2t", "samples": -(-2 * 10**12 // s)},
                     "input": {"seq_len": s, "vocab": V}, "default_batch": batch,
                     "optimizer": "adam",
                     "layers": layers(L, h, ffn, H, KV, V, theta, moe)})


if __name__ == "__main__":
    main()
