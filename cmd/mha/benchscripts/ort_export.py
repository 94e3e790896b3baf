"""Export nn.MultiheadAttention self-attention to ONNX for `mha bench --ort`.

    python3 ort_export.py --E E --H H --seed S [--causal] [--need-weights] --out model.onnx
                          --check check.json

The module is built exactly as torch_mha.py builds it (torch.manual_seed(S), then
nn.MultiheadAttention(E, H, batch_first=True) in eval mode), wrapped so that the graph takes one
input x [B, T, E] (both axes dynamic, so one file serves every T) and returns out [B, T, E] and,
with --need-weights, weights [B, T, T] averaged over heads. With --causal the boolean causal mask
is built inside the graph from T. PyTorch 1.13 serialises ONNX itself (opset 14); the `onnx`
Python package is not needed.

--check receives a small input and PyTorch's outputs for it, so ort_bench.js can confirm that
ONNX Runtime computes the same thing before anything is timed.
"""

import argparse
import json
import os

import torch


class SelfAttention(torch.nn.Module):
    """x ↦ nn.MultiheadAttention(x, x, x), with the causal mask made from x's length."""

    def __init__(self, m, causal, need_weights):
        super().__init__()
        self.m, self.causal, self.need_weights = m, causal, need_weights

    def forward(self, x):
        mask = None
        if self.causal:
            t = x.shape[1]
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        out, w = self.m(x, x, x, need_weights=self.need_weights, attn_mask=mask)
        return (out, w) if self.need_weights else out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--E", type=int, required=True)
    p.add_argument("--H", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--need-weights", action="store_true")
    p.add_argument("--out", required=True)
    p.add_argument("--check", required=True)
    a = p.parse_args()

    torch.manual_seed(a.seed)
    m = torch.nn.MultiheadAttention(a.E, a.H, batch_first=True).eval()
    model = SelfAttention(m, a.causal, a.need_weights).eval()
    x = torch.randn(2, 9, a.E)
    outputs = ["out", "weights"] if a.need_weights else ["out"]
    axes = {"x": {0: "B", 1: "T"}, "out": {0: "B", 1: "T"}, "weights": {0: "B", 1: "T", 2: "T"}}
    # Traced with autograd on: under no_grad nn.MultiheadAttention takes its fused fast path,
    # aten::_native_multi_head_attention, which has no ONNX export.
    tmp = a.out + ".tmp"
    torch.onnx.export(model, (x,), tmp, input_names=["x"], output_names=outputs,
                      dynamic_axes={k: axes[k] for k in ["x"] + outputs}, opset_version=14)
    os.replace(tmp, a.out)

    with torch.no_grad():
        r = model(x)
    out, w = (r if a.need_weights else (r, None))
    check = {"B": 2, "T": 9, "E": a.E, "x": x.flatten().tolist(), "out": out.flatten().tolist()}
    if w is not None:
        check["weights"] = w.flatten().tolist()
    with open(a.check + ".tmp", "w") as f:
        json.dump(check, f)
    os.replace(a.check + ".tmp", a.check)


if __name__ == "__main__":
    main()
