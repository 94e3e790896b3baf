#!/usr/bin/python3
"""Writes optim_golden.safetensors: torch.optim.AdamW trajectories and clip_grad_norm_ results
that nn/optim_test.go compares against. Run with Debian's python3-torch (PyTorch 1.13):

    /usr/bin/python3 nn/testdata/gen_optim_golden.py

Contents (all F32):
  init.<p>                 parameter values before the first step
  grad.<k>.<p>             the gradient used at step k (k = 0 … STEPS-1)
  <cfg>.param.<k>.<p>      parameter values after step k, for each config in CONFIGS
  <cfg>.exp_avg.<p>        AdamW's first moment after the last step
  <cfg>.exp_avg_sq.<p>     AdamW's second moment after the last step
  clip.grad.<p>            gradients before torch.nn.utils.clip_grad_norm_(…, CLIP_MAX_NORM)
  clip.clipped.<p>         the same gradients after it
  clip.total               the total norm it returned (scalar)
The metadata repeats the inputs (learning rates, configs, which parameters decay) as JSON.
"""

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata"))
from gen_golden import write_safetensors  # noqa: E402  (one writer for every golden file)

# name, shape, gradient scale, weight decay applies
PARAMS = [
    ("w", (3, 5), 1.0, True),
    ("b", (7,), 1e-3, False),
    ("c", (2, 3, 4), 10.0, True),
    ("s", (1,), 1.0, False),
]
LRS = [0.05, 0.1, 0.02, 0.0, 0.07]
STEPS = len(LRS)
CONFIGS = {
    "default": dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
    "custom": dict(betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
}
CLIP_MAX_NORM = 1.5


def adamw_trajectory(init, grads, cfg):
    params = {name: torch.nn.Parameter(init[name].clone()) for name, *_ in PARAMS}
    decay = [params[name] for name, _, _, d in PARAMS if d]
    no_decay = [params[name] for name, _, _, d in PARAMS if not d]
    opt = torch.optim.AdamW(
        [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LRS[0], **cfg)
    out = {}
    for k, lr in enumerate(LRS):
        for group in opt.param_groups:
            group["lr"] = lr
        for name, p in params.items():
            p.grad = grads[k][name].clone()
        opt.step()
        for name, p in params.items():
            out[f"param.{k}.{name}"] = p.detach().numpy().copy()
    for name, p in params.items():
        state = opt.state[p]
        assert float(state["step"]) == STEPS
        out[f"exp_avg.{name}"] = state["exp_avg"].numpy().copy()
        out[f"exp_avg_sq.{name}"] = state["exp_avg_sq"].numpy().copy()
    return out


def clip_case(gen):
    tensors, params = {}, []
    for name, shape, scale, _ in PARAMS:
        p = torch.nn.Parameter(torch.zeros(shape))
        p.grad = torch.randn(shape, generator=gen) * scale
        tensors[f"clip.grad.{name}"] = p.grad.numpy().copy()
        params.append((name, p))
    total = torch.nn.utils.clip_grad_norm_([p for _, p in params], CLIP_MAX_NORM)
    assert float(total) > CLIP_MAX_NORM, "the golden case must clip"
    for name, p in params:
        tensors[f"clip.clipped.{name}"] = p.grad.numpy().copy()
    tensors["clip.total"] = total.detach().numpy().reshape(())
    return tensors


def main():
    gen = torch.Generator().manual_seed(20240611)
    tensors = {}
    init = {name: torch.randn(shape, generator=gen) for name, shape, _, _ in PARAMS}
    grads = [{name: torch.randn(shape, generator=gen) * scale for name, shape, scale, _ in PARAMS}
             for _ in range(STEPS)]
    for name in init:
        tensors[f"init.{name}"] = init[name].numpy()
        for k in range(STEPS):
            tensors[f"grad.{k}.{name}"] = grads[k][name].numpy()
    for cfg_name, cfg in CONFIGS.items():
        for key, value in adamw_trajectory(init, grads, cfg).items():
            tensors[f"{cfg_name}.{key}"] = value
    tensors.update(clip_case(gen))
    metadata = {
        "torch": torch.__version__,
        "lrs": json.dumps(LRS),
        "configs": json.dumps(CONFIGS),
        "decay": json.dumps({name: d for name, _, _, d in PARAMS}),
        "clip_max_norm": json.dumps(CLIP_MAX_NORM),
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_golden.safetensors")
    write_safetensors(path, {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}, metadata)


if __name__ == "__main__":
    main()
