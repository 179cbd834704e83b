"""weights.py — the file `dlsim run --mode real --dump-weights` writes (format dlsim-weights-1: a
JSON header line, then every parameter as little-endian float32, layer after layer), read back and
compared layer by layer. Used by check_real.py and tests/validation/real_gpu.py.
"""
import array
import json
import sys

ADAM_LR = 1e-3  # the real executor's Adam step size (sim/exec/real/model.c)


def read(path):
    """(header, floats) of a weights file."""
    with open(path, "rb") as f:
        blob = f.read()
    nl = blob.index(b"\n")
    data = array.array("f")
    data.frombytes(blob[nl + 1:])
    if sys.byteorder != "little":
        data.byteswap()
    return json.loads(blob[:nl]), data


def layer_deviations(ref, got):
    """For each layer of `ref` (a header and its floats, as read() gives) against `got` of the same
    layout: (layer name, its scale = the largest |w| of ref's layer or 1, the |got - ref| of its
    elements, a NaN counted as infinite)."""
    (head, rw), (_, w) = ref, got
    off = 0
    for layer in head["layers"]:
        n = layer["params"]
        r, g = rw[off:off + n], w[off:off + n]
        scale = max(abs(x) for x in r) or 1.0
        yield layer["name"], scale, [abs(a - b) if abs(a - b) == abs(a - b) else float("inf")
                                     for a, b in zip(r, g)]
        off += n
