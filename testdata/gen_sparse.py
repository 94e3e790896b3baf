#!/usr/bin/env python3
"""Generate the golden files of sparse attention: patterns and normalizers of mha.SDPA.

Run from the repository root with the interpreter that has PyTorch 1.13:

    /usr/bin/python3 testdata/gen_sparse.py

PyTorch has neither the patterns nor sparsemax or entmax, so this writes them out by hand in
float64, pair by pair from the definitions (r = i + Tk − Tq − j, the query's distance back to
the key):

    local:W           |r| <= W
    dilated:W,D       |r| <= W*D and r % D == 0
    strided:S         |r| < S or r % S == 0
    global:I,J,...    i + Tk − Tq or j listed
    bigbird:W,G,0,_   |r| <= W, or the query position or key < G (no random blocks: their
                      generator is Go's)
    blocks            the pairs of the marked blocks of `blocks` [Hq, nbq, nbk]

kept = union of the patterns; masked = not kept | padding | causal (bottom-right). The
normalizers act on each row's kept scores:

    sparsemax    p = max(z − τ, 0), τ from the sorted z (Martins & Astudillo 2016)
    entmax15     p = max(z/2 − τ, 0)², τ from the sorted z/2 (Peters et al. 2019, Alg. 2)
    entmax:α     p = max((α−1)z − τ, 0)^(1/(α−1)), τ by bisection, with the backward of the
                 paper (g = p^(2−α); dz = g·dp − g·Σg·dp/Σg) as an autograd Function
    topk:K       a softmax over the K largest scores

The closed forms are checked against bisection before anything is written. Gradients come from
autograd, through the closed forms. Each file holds q, k, v, grad_out, key_padding_mask and
blocks where used, and out, weights and grad.q/k/v; the metadata names the patterns, the blocks'
size, the normalizer and the causal alignment.
"""

import math
import os
import sys
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import write_safetensors  # noqa: E402  the project's one safetensors writer

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sparse")

# name, patterns, block (BQ, BK), normalizer, causal, b, hq, hkv, tq, tk, d, padding
CASES = [
    ("local_softmax", ["local:3"], (4, 4), "softmax", True, 2, 4, 2, 7, 12, 8, False),
    ("dilated_sparsemax", ["dilated:2,3"], (4, 4), "sparsemax", False, 1, 2, 2, 13, 13, 4, False),
    ("strided_entmax15", ["strided:4"], (8, 4), "entmax15", True, 2, 2, 1, 16, 16, 8, True),
    ("global_entmax13", ["global:0,5"], (4, 8), "entmax:1.3", False, 1, 4, 4, 9, 14, 4, False),
    ("bigbird_topk", ["bigbird:2,1,0,0"], (4, 4), "topk:3", True, 2, 2, 2, 10, 10, 8, True),
    ("blocks_local_sparsemax", ["blocks", "local:1"], (4, 4), "sparsemax", True, 1, 4, 2, 11, 11, 8, False),
    ("union_entmax", ["local:2", "strided:5", "global:7"], (4, 4), "entmax:1.7", False, 1, 2, 1, 12, 12, 4, True),
]


def keep(spec, blocks, bq, bk, h, i, j, tq, tk):
    pi = i + tk - tq
    r = pi - j
    name, _, args = spec.partition(":")
    nums = [int(x) for x in args.split(",")] if args else []
    if name == "local":
        return abs(r) <= nums[0]
    if name == "dilated":
        return abs(r) <= nums[0] * nums[1] and r % nums[1] == 0
    if name == "strided":
        return abs(r) < nums[0] or r % nums[0] == 0
    if name == "global":
        return pi in nums or j in nums
    if name == "bigbird":
        return abs(r) <= nums[0] or pi < nums[1] or j < nums[1]
    if name == "blocks":
        return bool(blocks[h, i // bq, j // bk])
    raise ValueError(spec)


def sparsemax(z):
    """Closed form along the last dimension; −inf entries get 0."""
    zs, _ = torch.sort(z, dim=-1, descending=True)
    finite = torch.isfinite(zs)
    zs0 = torch.where(finite, zs, torch.zeros_like(zs))
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    cum = torch.cumsum(zs0, dim=-1)
    support = finite & (1 + k * zs0 > cum)
    kz = support.sum(dim=-1, keepdim=True).clamp(min=1)
    tau = (torch.gather(cum, -1, kz - 1) - 1) / kz.to(z.dtype)
    return torch.clamp(z - tau, min=0)


def entmax15(z):
    """Closed form of 1.5-entmax along the last dimension; −inf entries get 0."""
    x = z / 2
    xs, _ = torch.sort(x, dim=-1, descending=True)
    finite = torch.isfinite(xs)
    xs0 = torch.where(finite, xs, torch.zeros_like(xs))
    rho = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
    mean = torch.cumsum(xs0, dim=-1) / rho
    mean_sq = torch.cumsum(xs0 ** 2, dim=-1) / rho
    ss = rho * (mean_sq - mean ** 2)
    delta = torch.clamp((1 - ss) / rho, min=0)
    tau = mean - torch.sqrt(delta)
    support = (finite & (tau <= xs0)).sum(dim=-1, keepdim=True).clamp(min=1)
    tau_star = torch.gather(tau, -1, support - 1)
    return torch.clamp(x - tau_star, min=0) ** 2


def entmax_bisect_forward(z, alpha):
    a = alpha - 1
    x = a * z
    top = x.max(dim=-1, keepdim=True).values
    lo, hi = top - 1, top - (1 / torch.isfinite(x).sum(dim=-1, keepdim=True)) ** a
    for _ in range(200):
        mid = (lo + hi) / 2
        s = (torch.clamp(x - mid, min=0) ** (1 / a)).sum(dim=-1, keepdim=True)
        lo = torch.where(s >= 1, mid, lo)
        hi = torch.where(s >= 1, hi, mid)
    p = torch.clamp(x - (lo + hi) / 2, min=0) ** (1 / a)
    return p / p.sum(dim=-1, keepdim=True)


class EntmaxBisect(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, alpha):
        p = entmax_bisect_forward(z, alpha)
        ctx.save_for_backward(p)
        ctx.alpha = alpha
        return p

    @staticmethod
    def backward(ctx, dp):
        (p,) = ctx.saved_tensors
        g = torch.where(p > 0, p ** (2 - ctx.alpha), torch.zeros_like(p))
        dz = g * dp
        q = dz.sum(dim=-1, keepdim=True) / g.sum(dim=-1, keepdim=True)
        return dz - q * g, None


def topk_softmax(z, k):
    kept = torch.isfinite(z).sum(dim=-1, keepdim=True)
    zs, _ = torch.sort(z, dim=-1, descending=True)
    cut = torch.gather(zs, -1, (torch.clamp(kept, max=k) - 1).clamp(min=0))
    masked = z.masked_fill(z < cut, -math.inf)
    return torch.softmax(masked, dim=-1)


def normalize(z, spec):
    dead = torch.isinf(z).all(dim=-1, keepdim=True)
    zz = z.masked_fill(dead, 0.0)  # rows without a key: computed on zeros, then zeroed
    if spec == "softmax":
        p = torch.softmax(zz, dim=-1)
    elif spec == "sparsemax":
        p = sparsemax(zz)
    elif spec == "entmax15":
        p = entmax15(zz)
    elif spec.startswith("entmax:"):
        p = EntmaxBisect.apply(zz, float(spec[7:]))
    elif spec.startswith("topk:"):
        p = topk_softmax(zz, int(spec[5:]))
    else:
        raise ValueError(spec)
    return p.masked_fill(dead, 0.0)


def check_closed_forms():
    gen = torch.Generator().manual_seed(1)
    z = torch.randn((200, 9), generator=gen, dtype=torch.float64) * 2
    z[torch.rand((200, 9), generator=gen) < 0.2] = -math.inf
    z[:, 0] = torch.randn(200, generator=gen, dtype=torch.float64)
    assert torch.allclose(sparsemax(z), entmax_bisect_forward(z, 2.0), atol=1e-10)
    assert torch.allclose(entmax15(z), entmax_bisect_forward(z, 1.5), atol=1e-10)


def main():
    torch.set_num_threads(1)
    check_closed_forms()
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, patterns, (bq, bk), norm, causal, b, hq, hkv, tq, tk, d, padding in CASES:
        gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        t = {"q": torch.randn((b, hq, tq, d), generator=gen) * 1.5,
             "k": torch.randn((b, hkv, tk, d), generator=gen) * 1.5,
             "v": torch.randn((b, hkv, tk, d), generator=gen)}
        nbq, nbk = -(-tq // bq), -(-tk // bk)
        blocks = None
        if "blocks" in patterns:
            blocks = torch.rand((hq, nbq, nbk), generator=gen) < 0.35
            t["blocks"] = blocks
        kept = torch.zeros((hq, tq, tk), dtype=torch.bool)
        for h in range(hq):
            for i in range(tq):
                for j in range(tk):
                    kept[h, i, j] = any(keep(p, blocks, bq, bk, h, i, j, tq, tk) for p in patterns)
        masked = ~kept.unsqueeze(0).expand(b, hq, tq, tk)
        if padding:
            kpm = torch.zeros((b, tk), dtype=torch.bool)
            kpm[:, 1] = True
            kpm[-1, tk - 3] = True
            t["key_padding_mask"] = kpm
            masked = masked | kpm.view(b, 1, 1, tk)
        delta = tk - tq
        if causal:
            i, j = torch.arange(tq).view(-1, 1), torch.arange(tk).view(1, -1)
            masked = masked | (j > i + delta)
        leaves = {n: t[n].double().requires_grad_() for n in ("q", "k", "v")}
        rep = hq // hkv
        k, v = leaves["k"].repeat_interleave(rep, dim=1), leaves["v"].repeat_interleave(rep, dim=1)
        s = leaves["q"] @ k.transpose(-1, -2) / math.sqrt(d)
        w = normalize(s.masked_fill(masked, -math.inf), norm)
        out = w @ v
        grad_out = torch.randn(out.shape, generator=gen)
        (out * grad_out.double()).sum().backward()
        tensors = {n: x.numpy() for n, x in t.items()}
        tensors.update({"grad_out": grad_out.numpy(), "out": out.detach().numpy(), "weights": w.detach().numpy()})
        tensors.update({"grad." + n: x.grad.numpy() for n, x in leaves.items()})
        assert all(not np.isnan(x).any() for x in tensors.values() if x.dtype != bool)
        meta = {"patterns": ";".join(patterns), "block": f"{bq},{bk}", "normalizer": norm,
                "causal": "bottom_right" if causal else "none"}
        write_safetensors(os.path.join(OUT_DIR, name + ".safetensors"), tensors, meta)
        zeros = float((w == 0).double().mean())
        print(f"{name}: {zeros:.2f} of the weights exactly 0")


if __name__ == "__main__":
    main()
