#!/usr/bin/env python3
"""Generate the golden files of mha.SDPA, the functional attention API.

Run from the repository root with the interpreter that has PyTorch 1.13:

    /usr/bin/python3 testdata/gen_sdpa.py

PyTorch 1.13 has no enable_gqa, soft-capping, sinks or sliding windows, so this
writes the math out by hand in float64, with δ = Tk − Tq:

    K/V head of query head h   ⌊h·Hkv/Hq⌋ (repeat_interleave)
    s      = scale·q·kᵀ, then C·tanh(s/C) with a soft cap C
    s     -= slope_h·|i + δ − j| (ALiBi), s += attn_bias
    masked = attn_mask (true = may NOT attend) | key_padding_mask
             | causal (top-left: j > i; bottom-right: j > i + δ)
             | window (j < i + δ − L when L ≥ 0, j > i + δ + R when R ≥ 0)
    lse    = logsumexp over the row's logits and the sink column (+inf when the
             row has neither a visible key nor a sink)
    w      = exp(s − lse), out = w·v

Rotary positions follow Hugging Face's code (rotate_half for the "half" layout,
GPT-J's rotate_every_two for "interleaved", _compute_llama3_parameters for the
Llama 3 scaling) in float64: key j sits at position P + j and query i at
P + δ + i.

For every case in CASES it writes testdata/sdpa/<case>.safetensors: float32
inputs (q, k, v, masks, sinks, slopes, and grad_out, a random gradient of the
output) and float64 results (out, lse, weights for the small cases, and
autograd's grad.q, grad.k, grad.v, grad.sinks and grad.slopes of the loss
sum(out * grad_out)), with the options in the metadata; and
testdata/rope/apply.safetensors, one x rotated under each of APPLY_CASES. The output is
deterministic: each case draws from its own generator seeded from its name.
"""

import dataclasses
import math
import os
import sys
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import write_safetensors  # noqa: E402  the project's one safetensors writer

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sdpa")
ROPE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rope")


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    b: int
    hq: int
    hkv: int
    tq: int
    tk: int
    d: int
    dv: int
    causal: str = "none"  # "none", "top_left" or "bottom_right"
    window: tuple | None = None  # (left, right), -1 unbounded
    softcap: float = 0.0
    sinks: bool = False
    alibi: str = "none"  # "none", "default" or "given"
    key_padding: bool = False
    attn_mask: str = "none"  # "none", "2d" or "4d"
    attn_bias: str = "none"  # "none", "2d" or "4d"
    scale: float = 0.0  # 0: 1/sqrt(d)
    input_scale: float = 1.0
    weights: bool = True  # store the weights (small cases only)
    pad_keys: tuple = ()  # keys padded in every batch, on top of the random ones
    rope: tuple | None = None  # (theta, dim (0: all), "half" or "interleaved", offset P)
    rope_scaling: tuple | None = None  # Llama 3: (factor, low_freq_factor, high_freq_factor, original_max); YaRN: as in APPLY_CASES



CASES = [
    Case("mha_plain", 2, 3, 3, 5, 5, 4, 4),
    Case("gqa_bottom_right_cache", 2, 4, 2, 3, 9, 8, 6, causal="bottom_right"),
    Case("mqa_top_left_tq_gt_tk", 1, 4, 1, 7, 5, 5, 3, causal="top_left"),
    Case("window_noncausal_padding", 2, 2, 1, 6, 10, 4, 4, window=(2, 1), key_padding=True),
    Case("window_causal_softcap", 1, 3, 3, 8, 8, 6, 5, causal="bottom_right", window=(3, 0), softcap=5.0, input_scale=3.0),
    Case("sinks_window_padding", 2, 4, 2, 6, 7, 4, 3, window=(1, 1), sinks=True, key_padding=True, pad_keys=(2, 3, 4)),
    Case("alibi_default_gqa", 2, 6, 3, 4, 11, 4, 4, causal="bottom_right", alibi="default"),
    Case("alibi_given_masks_scale", 2, 4, 4, 5, 6, 3, 5, alibi="given", attn_mask="2d", attn_bias="4d", scale=0.7),
    Case("decode_tq1", 2, 8, 2, 1, 13, 8, 8, causal="bottom_right", window=(4, -1), sinks=True, softcap=2.0, alibi="default", input_scale=2.0),
    Case("all_options", 3, 6, 2, 7, 10, 7, 5, causal="top_left", window=(5, 2), softcap=3.0, sinks=True, alibi="default",
         key_padding=True, attn_mask="4d", attn_bias="2d", scale=0.3, input_scale=2.0),
    Case("fully_masked_no_sink", 1, 2, 1, 5, 5, 4, 4, window=(0, 0), key_padding=True, pad_keys=(1, 3)),
    Case("right_window_only", 1, 2, 2, 9, 6, 4, 4, causal="top_left", window=(-1, 1), attn_mask="2d"),
    Case("tiled_window_long", 1, 2, 1, 130, 600, 4, 4, causal="bottom_right", window=(40, 0), sinks=True, weights=False),
    Case("tiled_top_left_long", 1, 3, 1, 100, 300, 3, 2, causal="top_left", softcap=4.0, key_padding=True, alibi="default",
         input_scale=2.0, weights=False),
    Case("rope_half_gqa_cache", 2, 4, 2, 3, 9, 8, 6, causal="bottom_right", rope=(10000.0, 0, "half", 5)),
    Case("rope_interleaved_partial", 1, 2, 2, 6, 6, 8, 4, causal="top_left", rope=(100.0, 4, "interleaved", 0)),
    Case("rope_top_left_tq_gt_tk", 1, 2, 1, 7, 4, 6, 3, causal="top_left", rope=(50.0, 0, "half", 1)),
    Case("rope_llama3_decode", 1, 4, 1, 1, 20, 16, 8, causal="bottom_right", rope=(500000.0, 0, "half", 3000),
         rope_scaling=(8.0, 1.0, 4.0, 64)),
    Case("rope_all_options", 2, 4, 2, 5, 8, 8, 5, causal="bottom_right", window=(3, 0), softcap=4.0, sinks=True,
         alibi="default", key_padding=True, rope=(1000.0, 6, "interleaved", 7), rope_scaling=(4.0, 1.0, 2.0, 16)),
    Case("rope_yarn_gqa_cache", 1, 4, 2, 3, 40, 16, 8, causal="bottom_right", rope=(10000.0, 0, "half", 90),
         rope_scaling=("yarn", 4.0, 32, 0, 0, True, 0)),
    Case("rope_tiled_long", 1, 2, 1, 70, 300, 8, 4, causal="bottom_right", rope=(10000.0, 6, "half", 100), weights=False),
]

# Rotary.Apply's goldens: one x [B, H, T, D] rotated from position APPLY_START under each rotary.
APPLY_START = 11
APPLY_CASES = {
    "half": ((10000.0, 0, "half", 0), None),
    "interleaved_dim4": ((10000.0, 4, "interleaved", 0), None),
    "llama3_half": ((500000.0, 0, "half", 0), (8.0, 1.0, 4.0, 32)),
    # YaRN: factor, original length, beta_fast, beta_slow (0: the defaults), truncate, attention
    # factor (0: the default). Heads of 8, so the ramp turns inside the 4 pairs.
    "yarn_half": ((10000.0, 0, "half", 0), ("yarn", 4.0, 64, 0, 0, True, 0)),
    "yarn_unrounded_dim6": ((500.0, 6, "half", 0), ("yarn", 8.0, 32, 4.0, 0.5, False, 0.9)),
}


def alibi_slopes(n):
    def pow2(m):
        return [2.0 ** (-8.0 * (i + 1) / m) for i in range(m)]
    p = 1
    while p * 2 <= n:
        p *= 2
    s = pow2(p)
    if p < n:
        s += pow2(2 * p)[0::2][: n - p]
    return s


def rope_inv_freq(theta, dim, scaling):
    """Hugging Face's _compute_default_rope_parameters and _compute_llama3_parameters (scaling
    (factor, low, high, old)), or _compute_linear_scaling_rope_parameters (scaling ("linear",
    factor)), in float64."""
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).double() / dim))
    if scaling is None:
        return inv
    if scaling[0] == "linear":
        return inv / scaling[1]
    if scaling[0] == "yarn":
        return yarn_inv_freq(theta, dim, scaling)
    factor, low, high, old = scaling
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    inv_llama = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_llama)


def yarn_inv_freq(theta, dim, scaling):
    """Hugging Face's _compute_yarn_parameters' frequencies in float64, scaling ("yarn", factor,
    original length, beta_fast, beta_slow, truncate, attention factor), written from its
    definition: the pairs that complete beta_fast and beta_slow rotations within the original
    length bound a linear ramp from the original frequency to the frequency / factor."""
    _, factor, orig, beta_fast, beta_slow, truncate, _ = scaling
    beta_fast, beta_slow = beta_fast or 32, beta_slow or 1

    def pair(rotations):
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = pair(beta_fast), pair(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    base = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).double() / dim))
    return base / factor * ramp + base * (1 - ramp)


def yarn_attention_factor(scaling):
    """_compute_yarn_parameters' attention factor: the given one, else 0.1·ln(factor) + 1 (1 for
    a factor ≤ 1)."""
    factor, af = scaling[1], scaling[6]
    if af:
        return af
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def rotate_half(x):
    """Hugging Face's Llama rotate_half."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    """Hugging Face's GPT-J rotate_every_two."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rope(x, positions, rope, scaling):
    """Rotate x [..., T, D] at positions [T] as Hugging Face's apply_rotary_pos_emb (half) or
    GPT-J's apply_rotary_pos_emb (interleaved) do, on the first dim features (partial rotary);
    scaling is rope_inv_freq's (YaRN's with its attention factor), or ("longrope", short_factor,
    long_factor, original length, attention factor) for the half layout."""
    theta, dim, layout, _ = rope
    dim = dim or x.shape[-1]
    af = 1.0
    if scaling is not None and scaling[0] == "longrope":
        # _compute_longrope_parameters: the long factors when the call's seq_len (its largest
        # position plus one) passes the original length, the short ones otherwise; the cosines and
        # sines times the attention factor.
        _, short, long, orig, af = scaling
        ext = long if int(positions.max()) + 1 > orig else short
        inv = rope_inv_freq(theta, dim, None) / torch.tensor(ext, dtype=torch.float64)
    else:
        inv = rope_inv_freq(theta, dim, scaling)
        if scaling is not None and scaling[0] == "yarn":
            af = yarn_attention_factor(scaling)
    freqs = positions.double()[:, None] * inv[None, :]
    rot, rest = x[..., :dim], x[..., dim:]
    if layout == "half":
        emb = torch.cat((freqs, freqs), dim=-1)
        rot = rot * (emb.cos() * af) + rotate_half(rot) * (emb.sin() * af)
    else:
        cos, sin = freqs.cos().repeat_interleave(2, dim=-1) * af, freqs.sin().repeat_interleave(2, dim=-1) * af
        rot = rot * cos + rotate_every_two(rot) * sin
    return torch.cat([rot, rest], dim=-1)


def build(case):
    gen = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))

    def randn(*shape, std=1.0):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    def rand(*shape):
        return torch.rand(shape, generator=gen, dtype=torch.float64)

    t = {
        "q": randn(case.b, case.hq, case.tq, case.d, std=case.input_scale),
        "k": randn(case.b, case.hkv, case.tk, case.d, std=case.input_scale),
        "v": randn(case.b, case.hkv, case.tk, case.dv),
    }
    full = (case.b, case.hq, case.tq, case.tk)
    if case.key_padding:
        kpm = rand(case.b, case.tk) < 0.25
        for j in case.pad_keys:
            kpm[:, j] = True
        t["key_padding_mask"] = kpm
    if case.attn_mask != "none":
        shape = (case.tq, case.tk) if case.attn_mask == "2d" else full
        t["attn_mask"] = rand(*shape) < 0.2
    if case.attn_bias != "none":
        shape = (case.tq, case.tk) if case.attn_bias == "2d" else full
        bias = randn(*shape, std=1.5)
        bias[rand(*shape) < 0.1] = -math.inf
        t["attn_bias"] = bias
    if case.sinks:
        t["sinks"] = randn(case.hq, std=1.5)
    if case.alibi == "given":
        t["slopes"] = rand(case.hq) * 0.5
    return t


def reference(case, t):
    """Returns out, lse and weights, and the leaves of the autograd graph by name (q, k, v, and
    sinks and slopes when present)."""
    leaves = {n: t[n].double().requires_grad_() for n in ("q", "k", "v")}
    q, k, v = leaves["q"], leaves["k"], leaves["v"]
    rep = case.hq // case.hkv
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scale = case.scale if case.scale else 1 / math.sqrt(case.d)
    delta = case.tk - case.tq
    if case.rope is not None:
        offset = case.rope[3]
        q = apply_rope(q, torch.arange(case.tq) + offset + delta, case.rope, case.rope_scaling)
        k = apply_rope(k, torch.arange(case.tk) + offset, case.rope, case.rope_scaling)
    s = scale * q @ k.transpose(-1, -2)
    if case.softcap:
        s = case.softcap * torch.tanh(s / case.softcap)
    i = torch.arange(case.tq).view(-1, 1)
    j = torch.arange(case.tk).view(1, -1)
    if case.alibi != "none":
        slopes = t["slopes"].double() if case.alibi == "given" else torch.tensor(alibi_slopes(case.hq), dtype=torch.float64)
        slopes = leaves["slopes"] = slopes.clone().requires_grad_()
        s = s - slopes.view(1, -1, 1, 1) * (i + delta - j).abs().double()
    if "attn_bias" in t:
        s = s + t["attn_bias"].double()
    masked = torch.zeros(s.shape, dtype=torch.bool)
    if "attn_mask" in t:
        masked = masked | t["attn_mask"]
    if "key_padding_mask" in t:
        masked = masked | t["key_padding_mask"].view(case.b, 1, 1, case.tk)
    if case.causal == "top_left":
        masked = masked | (j > i)
    elif case.causal == "bottom_right":
        masked = masked | (j > i + delta)
    if case.window is not None:
        left, right = case.window
        if left >= 0:
            masked = masked | (j < i + delta - left)
        if right >= 0:
            masked = masked | (j > i + delta + right)
    s = s.masked_fill(masked, -math.inf)
    logits = s
    if "sinks" in t:
        leaves["sinks"] = t["sinks"].double().requires_grad_()
        sink = leaves["sinks"].view(1, -1, 1, 1).expand(case.b, case.hq, case.tq, 1)
        logits = torch.cat([s, sink], dim=-1)
    # A row with no visible key and no sink has lse = +inf and weights 0; its logits are set to 0
    # before logsumexp so that autograd sees no -inf - -inf.
    dead = torch.isinf(logits).all(dim=-1)
    safe = torch.logsumexp(logits.masked_fill(dead.unsqueeze(-1), 0.0), dim=-1)
    lse = safe.masked_fill(dead, math.inf)
    w = torch.exp(s - safe.unsqueeze(-1)).masked_fill(dead.unsqueeze(-1), 0.0)
    out = w @ v
    assert not torch.isnan(out).any() and not torch.isnan(w).any()
    return out, lse, w, leaves


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    total = 0
    for case in CASES:
        t = build(case)
        out, lse, w, leaves = reference(case, t)
        gen = torch.Generator().manual_seed(zlib.crc32(case.name.encode() + b"/grad"))
        grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float32)
        (out * grad_out.double()).sum().backward()
        grads = {"grad." + n: x.grad.detach().numpy() for n, x in leaves.items()}
        assert all(not np.isnan(g).any() for g in grads.values())
        out, lse, w = out.detach(), lse.detach(), w.detach()
        tensors = {name: x.numpy() for name, x in t.items()}
        tensors["slopes"] = tensors["slopes"].astype("float64") if "slopes" in tensors else None
        tensors = {n: x for n, x in tensors.items() if x is not None}
        tensors["out"], tensors["lse"] = out.numpy(), lse.numpy()
        if case.weights:
            tensors["weights"] = w.numpy()
        tensors["grad_out"] = grad_out.numpy()
        tensors.update(grads)
        meta = {
            "causal": case.causal,
            "window": "none" if case.window is None else f"{case.window[0]},{case.window[1]}",
            "softcap": repr(case.softcap),
            "alibi": case.alibi,
            "scale": repr(case.scale),
            "rope": "none" if case.rope is None else ",".join(str(x) for x in case.rope),
            "rope_scaling": "none" if case.rope_scaling is None else ",".join(str(x) for x in case.rope_scaling),
        }
        path = os.path.join(OUT_DIR, case.name + ".safetensors")
        write_safetensors(path, tensors, meta)
        size = os.path.getsize(path)
        total += size
        rows = int((w.sum(-1) == 0).sum())
        print(f"{case.name}: {size} bytes, {rows} fully masked rows")
    gen = torch.Generator().manual_seed(zlib.crc32(b"rope_apply"))
    x = torch.randn((2, 3, 7, 8), generator=gen, dtype=torch.float32)
    tensors = {"x": x.numpy()}
    meta = {"start": str(APPLY_START)}
    for name, (rope, scaling) in APPLY_CASES.items():
        tensors[name] = apply_rope(x.double(), torch.arange(7) + APPLY_START, rope, scaling).numpy()
        meta[name] = ",".join(str(v) for v in rope) + ";" + ("none" if scaling is None else ",".join(str(v) for v in scaling))
    os.makedirs(ROPE_DIR, exist_ok=True)
    path = os.path.join(ROPE_DIR, "apply.safetensors")
    write_safetensors(path, tensors, meta)
    total += os.path.getsize(path)
    print(f"total {total} bytes")
    assert total < 1 << 20


if __name__ == "__main__":
    main()
