#!/usr/bin/env python3
"""Writes the Llama-3 workloads (llama3-8b, llama3-70b, llama3-405b) and llama-tiny.

Shapes: "The Llama 3 Herd of Models" (Meta, 2024), Table 3, and the models' params.json
(vocabulary 128,256; RoPE theta 500,000; RMSNorm eps 1e-5; untied output layer). A block is
pre-RMSNorm grouped-query attention (fused QKV column-parallel in Megatron-Core's grouped layout,
rotary embedding, flash-style attention, output projection row-parallel) and a pre-RMSNorm SwiGLU
MLP (gate and up fused and interleaved, column-parallel; down projection row-parallel); no biases.

Usage: python3 workloads/make_llama.py   (rewrites the four files next to this script)
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


def layers(L, h, ffn, H, KV, V):
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
            {"name": f"{b}.rope", "type": "rope", "heads": H, "kv_heads": KV, "theta": 500000,
             "block": b},
            {"name": f"{b}.attn", "type": "attention", "heads": H, "kv_heads": KV,
             "flash": True, "block": b},
            {"name": f"{b}.proj", "type": "linear", "out_features": h, "bias": False,
             "tp": "row", "block": b},
            {"name": f"{b}.add1", "type": "add", "inputs": [f"{b}.proj", prev], "block": b},
            {"name": f"{b}.norm2", "type": "rmsnorm", "block": b},
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
        doc = {"name": name, "description": desc, "dataset": ds,
               "input": {"seq_len": s, "vocab": V}, "default_batch": batch,
               "optimizer": "adam", "layers": layers(L, h, ffn, H, KV, V)}
        head = ",\n".join(f'  "{k}": {json.dumps(v)}' for k, v in doc.items() if k != "layers")
        body = ",\n".join("    " + json.dumps(l) for l in doc["layers"])
        with open(os.path.join(here, name + ".json"), "w") as f:
            f.write("{\n" + head + ',\n  "layers": [\n' + body + "\n  ]\n}\n")


if __name__ == "__main__":
    main()
