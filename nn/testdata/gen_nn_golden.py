#!/usr/bin/env python3
"""Generate the PyTorch golden files of package nn's model tests.

Run from the repository root with the interpreter that has PyTorch 1.13:

    /usr/bin/python3 nn/testdata/gen_nn_golden.py

For every case in CASES this writes nn/testdata/golden/<case>.safetensors holding the float32
parameters of torch_model.Model under their names, the inputs "tokens" [B, T] (I64), "targets"
[B, T] (I64) and "scored" [B, T] (BOOL), and the float64 results of the same model run in double
precision: "logits" [B, T, V], "loss" (a scalar), "correct" (a scalar count) and "grad.<name>"
for every parameter; with token type embeddings, also the "token_types" [B, T] (I64) the run
used, unless the case runs with the default (all 0, no tensor stored). The model config is in the metadata under "config", as in a checkpoint, and
the parameter names in named_parameters() order under "names" (a JSON list).
Each case draws from its own generator seeded from its name, so the output is deterministic.
"""

import json
import os
import sys
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata"))
from gen_golden import write_safetensors  # noqa: E402  (one writer for every golden file)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
BATCH, LENGTH = 2, 7

# name: (config fields, fraction of unscored positions)
CASES = {
    "post_learned": (dict(d_model=12, ffn=16, norm="post", positions="learned"), 0.0),
    "pre_sinusoidal": (dict(d_model=8, norm="pre", positions="sinusoidal"), 0.3),
    "post_sinusoidal_attn_only": (dict(d_model=8, norm="post", positions="sinusoidal", attn_only=True), 0.3),
    "pre_learned_attn_only": (dict(d_model=8, norm="pre", positions="learned", attn_only=True), 0.0),
    # Hugging Face families, less their attention (rotary positions, grouped K/V heads,
    # bidirectional BERT): Llama, RMSNorm + SwiGLU without biases and no position embedding ...
    "llama": (dict(d_model=8, ffn=12, norm="pre", positions="none", norm_kind="rmsnorm", norm_eps=1e-6,
                   activation="swiglu", no_mlp_bias=True, no_head_bias=True), 0.0),
    # ... tied, post-norm, with SwiGLU's optional biases and an eps large enough to matter;
    "llama_tied_post": (dict(d_model=8, ffn=12, norm="post", positions="none", norm_kind="rmsnorm", norm_eps=0.1,
                             activation="swiglu", tie_embeddings=True), 0.3),
    # GPT-2: GELU-tanh, learned positions, head tied to the token embedding without bias;
    "gpt2": (dict(d_model=8, ffn=16, norm="pre", positions="learned", norm_eps=1e-5, activation="gelu_new",
                  tie_embeddings=True, no_head_bias=True), 0.0),
    # BERT's embeddings: token types and the embedding LayerNorm, eps 1e-12, types given ...
    "bert": (dict(d_model=12, ffn=16, norm="post", positions="learned", norm_eps=1e-12, activation="gelu",
                  type_vocab=2, emb_norm=True), 0.0),
    # ... and types left at their default 0, with every other option mixed in.
    "bert_default_types": (dict(d_model=8, norm="pre", positions="sinusoidal", norm_kind="rmsnorm",
                                activation="gelu_pytorch_tanh", no_mlp_bias=True, type_vocab=3,
                                emb_norm=True), 0.3),
}

# The cases that run with token types other than the default.
GIVEN_TYPES = {"bert"}


def make_case(name, fields, unscored):
    torch.manual_seed(zlib.crc32(name.encode()))
    cfg = torch_model.Config(vocab=11, seq_len=LENGTH + 2, heads=2, layers=2, seed=0, **fields)
    cfg.ffn = 0 if cfg.attn_only else cfg.hidden()
    model = torch_model.Model(cfg)
    with torch.no_grad():
        for p in model.parameters():  # move LayerNorm gains, biases and zero inits off their defaults
            p.add_(0.2 * torch.randn_like(p))
    params = {k: v.detach().clone().numpy() for k, v in model.named_parameters()}

    tokens = torch.randint(0, cfg.vocab, (BATCH, LENGTH))
    targets = torch.randint(0, cfg.vocab, (BATCH, LENGTH))
    scored = torch.rand(BATCH, LENGTH) >= unscored
    scored[0, 0] = True
    types = None
    if name in GIVEN_TYPES:
        types = torch.randint(0, cfg.type_vocab, (BATCH, LENGTH))

    model = model.double().eval()
    logits = model(tokens, types)
    loss, correct, _ = torch_model.loss(logits, targets, scored)
    loss.backward()

    tensors = dict(params)
    tensors.update(tokens=tokens.numpy(), targets=targets.numpy(), scored=scored.numpy(),
                   logits=logits.detach().numpy(), loss=np.array(loss.item()),
                   correct=np.array(float(correct)))
    if types is not None:
        tensors["token_types"] = types.numpy()
    for k, p in model.named_parameters():
        tensors["grad." + k] = p.grad.numpy()
    path = os.path.join(GOLDEN_DIR, name + ".safetensors")
    names = json.dumps([k for k, _ in model.named_parameters()])
    write_safetensors(path, tensors, {"config": cfg.to_json(), "names": names})
    print(f"{path}: loss {loss.item():.6f}, {correct} correct, {os.path.getsize(path)} bytes")


def main():
    torch.set_num_threads(1)
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    for name, (fields, unscored) in CASES.items():
        make_case(name, fields, unscored)


if __name__ == "__main__":
    main()
