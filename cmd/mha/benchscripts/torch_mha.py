"""Time PyTorch's multi-head attention for `mha bench --torch`: one sequence length, one variant.

    python3 torch_mha.py probe --threads N
    python3 torch_mha.py run --variant torch|torch-sdpa --T T --B B --E E --H H --threads N
                             --runs R --warmup W --seed S [--causal] [--need-weights] [--backward]

`probe` prints {"torch": version, "blas": [mapped libblas files], "mm_gflops": torch.mm 512³ rate}.
`run` prints {"ms": [one time per run], "rss_base_kib": RSS once the module and input exist,
"rss_peak_kib": peak RSS at the end, "fast_path": whether nn.MultiheadAttention took its fused
path}. Only that JSON line goes to stdout.

Variants: "torch" calls nn.MultiheadAttention(E, H, batch_first=True) itself (x, x, x; a boolean
causal attn_mask when --causal); "torch-sdpa" does the same computation by hand with F.linear on
the module's in_proj/out_proj weights around torch.nn.functional._scaled_dot_product_attention
(PyTorch 1.13's name; is_causal instead of a mask). Both run under torch.inference_mode().

With --backward each timed call is a training step instead: the module in train mode (dropout 0,
so no fast path), x.requires_grad_(), the forward, then out.backward(dy) for a fixed random dy;
the gradients of x and of every parameter are set to zero before each call, outside the timing,
so the call adds into them. The check then also compares the variant's gradients with
nn.MultiheadAttention's.
"""

import argparse
import json
import resource
import sys
import time

import torch
import torch.nn.functional as F


def rss_kib():
    """Current resident set size in KiB (Linux), or the peak so far elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return peak_kib()


def peak_kib():
    """Peak resident set size in KiB."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r // 1024 if sys.platform == "darwin" else r


def blas_libraries():
    """The libblas.so files mapped into this process (Linux): the BLAS that Debian's torch, built
    with BLAS_INFO=generic, calls. Debian's alternatives point it at OpenBLAS, BLIS or the slow
    reference BLAS. Other libraries (an OpenBLAS liblapack, say) may be mapped beside it without
    doing the matrix products, so only libblas counts."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if path.startswith("/") and path.rsplit("/", 1)[-1].startswith("libblas.so"):
                    libs.add(path)
    except OSError:
        pass
    return sorted(libs)


def probe(args):
    torch.set_num_threads(args.threads)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    for _ in range(3):
        torch.mm(a, b)
    n, t0 = 0, time.perf_counter()
    while n < 5 or time.perf_counter() - t0 < 0.2:
        torch.mm(a, b)
        n += 1
    gflops = n * 2 * 512**3 / (time.perf_counter() - t0) / 1e9
    print(json.dumps({"torch": torch.__version__, "blas": blas_libraries(), "mm_gflops": round(gflops, 1)}))


def sdpa_forward(m, x, heads, causal, need_weights):
    """nn.MultiheadAttention's self-attention written out around _scaled_dot_product_attention."""
    b, t, e = x.shape
    q, k, v = F.linear(x, m.in_proj_weight, m.in_proj_bias).chunk(3, dim=-1)

    def split(y):  # [B, T, E] → [B, H, T, d]
        return y.view(b, t, heads, e // heads).transpose(1, 2)

    # (query, key, value, attn_mask, dropout_p, need_attn_weights, is_causal) in PyTorch 1.13.
    o, w = F._scaled_dot_product_attention(split(q), split(k), split(v), None, 0.0, need_weights, causal)
    o = F.linear(o.transpose(1, 2).reshape(b, t, e), m.out_proj.weight, m.out_proj.bias)
    return o, (w.mean(dim=1) if need_weights else None)


def causal_mask(t):
    """PyTorch's boolean attn_mask for causal attention: True = may not attend."""
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)


def forward_fn(variant, m, x, heads, causal, need_weights):
    """The call to time, as a function of nothing."""
    if variant == "torch":
        mask = causal_mask(x.shape[1]) if causal else None
        return lambda: m(x, x, x, need_weights=need_weights, attn_mask=mask)
    if variant == "torch-sdpa":
        return lambda: sdpa_forward(m, x, heads, causal, need_weights)
    raise SystemExit(f"unknown variant {variant!r}, want torch or torch-sdpa")


def step_fn(forward, dy):
    """Forward, then the backward of dy into the .grad of every leaf, as a function of nothing."""
    def step():
        out, _ = forward()
        out.backward(dy)
    return step


def zero_grads(m, x):
    """Set the gradients of m's parameters and of x to zero (the first step allocates them)."""
    m.zero_grad(set_to_none=False)
    if x.grad is not None:
        x.grad.zero_()


def rel_err(got, want):
    return ((got - want).norm() / want.norm()).item()


def check(variant, m, heads, causal, need_weights, backward):
    """Check on a small input that the variant computes what nn.MultiheadAttention computes, and
    with backward the same gradients of the input and of every parameter."""
    x = torch.randn(2, 9, m.embed_dim, requires_grad=backward)
    mask = causal_mask(9) if causal else None
    want, want_w = m(x, x, x, need_weights=True, attn_mask=mask)
    got, got_w = forward_fn(variant, m, x, heads, causal, need_weights)()
    errs = [rel_err(got, want)]
    if need_weights:
        errs.append(rel_err(got_w, want_w))
    if backward:
        dy, leaves = torch.randn_like(want), [x, *m.parameters()]
        grads = zip(torch.autograd.grad(got, leaves, dy), torch.autograd.grad(want, leaves, dy))
        errs += [rel_err(g, w) for g, w in grads]
    err = max(errs)
    if not err < 1e-4:
        raise SystemExit(f"{variant} differs from nn.MultiheadAttention by {err:.2g} (relative)")


def run(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    m = torch.nn.MultiheadAttention(args.E, args.H, dropout=0.0, batch_first=True).train(args.backward)
    with torch.enable_grad() if args.backward else torch.inference_mode():
        check(args.variant, m, args.H, args.causal, args.need_weights, args.backward)
        x = torch.randn(args.B, args.T, args.E, requires_grad=args.backward)
        f = forward_fn(args.variant, m, x, args.H, args.causal, args.need_weights)
        reset = lambda: None
        if args.backward:
            f, reset = step_fn(f, torch.randn(args.B, args.T, args.E)), lambda: zero_grads(m, x)
        base = rss_kib()
        for _ in range(args.warmup):
            reset()
            f()
        ms = []
        for _ in range(args.runs):
            reset()
            t0 = time.perf_counter()
            f()
            ms.append((time.perf_counter() - t0) * 1e3)
    # PyTorch 1.13's conditions for torch._native_multi_head_attention, as they apply here.
    fast = args.variant == "torch" and not args.causal and args.H % 2 == 0 and not args.backward
    print(json.dumps({"ms": ms, "rss_base_kib": base, "rss_peak_kib": peak_kib(), "fast_path": fast}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["probe", "run"])
    p.add_argument("--variant", default="torch")
    p.add_argument("--T", type=int, default=512)
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--E", type=int, default=768)
    p.add_argument("--H", type=int, default=12)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--need-weights", action="store_true")
    p.add_argument("--backward", action="store_true")
    args = p.parse_args()
    probe(args) if args.mode == "probe" else run(args)


if __name__ == "__main__":
    main()
