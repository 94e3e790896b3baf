#!/usr/bin/env python3
"""Measure PyTorch's own bfloat16 error on the case of mha's bf16 accuracy test.

Run from the repository root with the interpreter that has PyTorch 1.13:

    /usr/bin/python3 testdata/gen_bf16_accuracy.py

The case: nn.MultiheadAttention(768, 12, batch_first=True) self-attention on
x [1, 256, 768], without and with a causal mask. Its tensors come from
splitmix64 streams that the Go test (bf16_test.go, caseValues) reproduces bit
for bit, so no tensor is stored: value i of the stream with seed s is

    z = splitmix64 output i+1 of state s   (state += 0x9e3779b97f4a7c15, ...)
    u = ((z >> 40) + 0.5) / 2^24           (in float64)
    v = float32((2u − 1) · bound)

with x: seed 1, bound √3 (unit variance); in_proj_weight [2304, 768]: seed 2,
bound √(6 / (768 + 2304)) (Xavier, as PyTorch initialises it); in_proj_bias:
seed 3, bound 0.1; out_proj.weight [768, 768]: seed 4, bound 1/√768;
out_proj.bias: seed 5, bound 0.1.

It writes testdata/bf16/accuracy.json: for each case the relative Frobenius
error ‖y − y₆₄‖/‖y₆₄‖ of PyTorch's float32 and bfloat16 outputs against its
float64 output (the module and x cast with .double() / .bfloat16(), CPU), and
the float64 output's sum and sum of squares, which the Go test checks its own
float64 reference against so that both are sure to measure the same case.
"""

import copy
import json
import math

import numpy as np
import torch

E, H, T = 768, 12, 256
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def stream(seed, n, bound):
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = ((z >> np.uint64(40)).astype(np.float64) + 0.5) / 16777216.0
    return ((2 * u - 1) * bound).astype(np.float32)


def main():
    torch.manual_seed(0)
    x = torch.from_numpy(stream(1, T * E, math.sqrt(3))).reshape(1, T, E)
    sd = {
        "in_proj_weight": torch.from_numpy(stream(2, 3 * E * E, math.sqrt(6 / (E + 3 * E)))).reshape(3 * E, E),
        "in_proj_bias": torch.from_numpy(stream(3, 3 * E, 0.1)),
        "out_proj.weight": torch.from_numpy(stream(4, E * E, 1 / math.sqrt(E))).reshape(E, E),
        "out_proj.bias": torch.from_numpy(stream(5, E, 0.1)),
    }
    m = torch.nn.MultiheadAttention(E, H, batch_first=True)
    m.load_state_dict(sd)
    m.eval()
    cases = {}
    for name, causal in (("plain", False), ("causal", True)):
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if causal else None
        outs = {}
        with torch.no_grad():
            for dt in (torch.float64, torch.float32, torch.bfloat16):
                md = copy.deepcopy(m).to(dt)  # m itself stays float32
                y, _ = md(x.to(dt), x.to(dt), x.to(dt), need_weights=False, attn_mask=mask)
                outs[dt] = y.double()
        ref = outs[torch.float64]
        rel = lambda y: float(torch.linalg.norm(y - ref) / torch.linalg.norm(ref))
        cases[name] = {
            "causal": causal,
            "torch_float32_rel_err": rel(outs[torch.float32]),
            "torch_bfloat16_rel_err": rel(outs[torch.bfloat16]),
            "ref_sum": float(ref.sum()),
            "ref_sumsq": float((ref * ref).sum()),
        }
        print(name, cases[name])
    doc = {
        "what": "relative Frobenius error of nn.MultiheadAttention outputs vs float64, E=768 H=12 T=256 B=1 self-attention, CPU",
        "torch": torch.__version__,
        "generator": "testdata/gen_bf16_accuracy.py",
        "cases": cases,
    }
    with open("testdata/bf16/accuracy.json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
