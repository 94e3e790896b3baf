"""Time PyTorch's eager equivalent of mha's attention core for `mha bench --gqa/--window/--decode`.

    python3 torch_sdpa.py --T T --B B --E E --H H --Hkv HKV --window W --threads N --runs R
                          --warmup W [--causal] [--decode]

PyTorch 1.13 has no grouped K/V heads, sliding window or KV cache in its attention calls, so this
times what a user of it would write: K and V repeated per query head (repeat_interleave), then
softmax(q·kᵀ/√D + mask)·v in float32 under torch.inference_mode(), with the causal mask and the
window (query i sees keys i − W … i) as an explicit additive mask. With --decode, T is the cache
length and a call is one query per head against the whole cache (the repeat of the cache
included, as a model without GQA support does it).

It prints {"ms": [one time per run], "rss_base_kib": RSS once the tensors exist, "rss_peak_kib":
peak RSS at the end}: the fields mha bench's other children print.
"""

import argparse
import json
import math
import time

import torch

from torch_mha import peak_kib, rss_kib


def mask(tq, tk, causal, window):
    """The additive mask [tq, tk] of bottom-right causal attention and a window of W keys, or None."""
    if not causal and window <= 0:
        return None
    i = torch.arange(tq).view(-1, 1) + (tk - tq)
    j = torch.arange(tk).view(1, -1)
    hidden = j > i
    if window > 0:
        hidden = hidden | (j < i - window)
    return torch.zeros(tq, tk).masked_fill(hidden, -math.inf)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--T", type=int, required=True)
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--E", type=int, required=True)
    p.add_argument("--H", type=int, required=True)
    p.add_argument("--Hkv", type=int, required=True)
    p.add_argument("--window", type=int, default=0)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--decode", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(2)
    d = args.E // args.H
    tq = 1 if args.decode else args.T
    q = torch.randn(args.B, args.H, tq, d)
    k = torch.randn(args.B, args.Hkv, args.T, d)
    v = torch.randn(args.B, args.Hkv, args.T, d)
    m = mask(tq, args.T, args.causal or args.decode, args.window)
    rep = args.H // args.Hkv

    def call():
        kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = (q @ kk.transpose(-1, -2)) / math.sqrt(d)
        if m is not None:
            s = s + m
        return torch.softmax(s, dim=-1) @ vv

    with torch.inference_mode():
        base = rss_kib()
        for _ in range(args.warmup):
            call()
        ms = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            call()
            ms.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"ms": ms, "rss_base_kib": base, "rss_peak_kib": peak_kib()}))


if __name__ == "__main__":
    main()
