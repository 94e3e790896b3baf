#!/usr/bin/env python3
"""Reference direct logit attribution and logit lens for package circuits.

Run from the repository root with the interpreter that has PyTorch 1.13:

    /usr/bin/python3 testdata/gen_circuits_dla.py

The models are the tiny Hugging Face folders of testdata/pretrained, rebuilt from the same
draws by gen_pretrained.py (its *_weights functions) and run by its float64 forwards, whose trace
records the residual stream; this script only reads the trace. A check against each folder's
expected.safetensors makes sure the weights are the committed ones.

Direct logit attribution follows TransformerLens (ActivationCache.decompose_resid,
stack_head_results, apply_ln_to_stack with the cached ln_final scale, logit_attrs): at the metric
position the last block's output x is the sum of the embeddings, every head's z_h·W_O,h, every
attention output bias and every MLP's output; each component c contributes
(center(c)/σ ⊙ γ)·(W_U[target] − W_U[foil]) with σ = √(var(x) + eps) for LayerNorm
(c/σ ⊙ γ, σ = √(mean(x²) + eps), for RMSNorm), and the final norm's β and the head's bias the
constant terms. The script checks that the parts sum to the logit difference.

The logit lens applies the model's own final norm (with the statistics of the stream it is
given) and head (BERT: its masked-LM transform and decoder; its stream is normalised already)
to the stream entering every block and to the last block's output, and keeps the top K tokens.

It writes testdata/circuits/dla_<folder>.safetensors: input_ids (I64 [T]); for the pre-norm models
metric (I64 [3]: target, foil, position), dla.ld, dla.embed, dla.norm_bias, dla.head_bias,
dla.scale (F64 [1]), dla.heads (F64 [L, H]), dla.attn_bias and dla.mlp (F64 [L]); for every
model lens.ids (I64 [L+1, T, K]), lens.logits and lens.probs (F64 [L+1, T, K]).
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_pretrained as gp  # noqa: E402  the float64 forwards
from gen_golden import read_safetensors, write_safetensors  # noqa: E402

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "circuits")
K = 5


def committed(name, cfg_logits):
    """Asserts that the rebuilt model's logits on the folder's reference input are its
    expected.safetensors logits, and returns that input's first sequence."""
    exp, _ = read_safetensors(os.path.join(gp.OUT_DIR, name, "expected.safetensors"))
    ids = torch.from_numpy(exp["input_ids"].astype(np.int64))
    logits = cfg_logits(ids)
    err = np.abs(logits.numpy() - exp["logits"]).max()
    assert err < 1e-12, f"{name}: the rebuilt model differs from the committed folder by {err}"
    return ids[:1]


def lens(streams, unembed):
    """Top K ids, logits and probabilities of every stream [1, T, E] through unembed."""
    ids, logits, probs = [], [], []
    for x in streams:
        lg = unembed(x)[0]
        p = torch.softmax(lg, dim=-1)
        top = torch.argsort(lg, dim=-1, descending=True)[:, :K]
        ids.append(top.numpy())
        logits.append(torch.gather(lg, 1, top).numpy())
        probs.append(torch.gather(p, 1, top).numpy())
    return {"lens.ids": np.stack(ids).astype(np.int64), "lens.logits": np.stack(logits), "lens.probs": np.stack(probs)}


def dla(trace, logits, head_results, attn_bias, unembed_w, gamma, beta, eps, rms, target, foil, pos, head_bias=None):
    """The direct logit attribution at pos; head_results(l, z_row) gives head h's write [E] per
    head, attn_bias(l) the output bias of block l (or None); head_bias is the head's bias [V], if
    any."""
    x = trace["resid_final"][0, pos]
    direction = unembed_w[target] - unembed_w[foil]
    if rms:
        scale = torch.sqrt(x.pow(2).mean() + eps)
    else:
        scale = torch.sqrt((x - x.mean()).pow(2).mean() + eps)

    def contrib(c):
        if not rms:
            c = c - c.mean()
        return float((c / scale * gamma) @ direction)

    layers = len(trace["z"])
    out = {"dla.embed": contrib(trace["resid_pre"][0][0, pos]),
           "dla.heads": np.array([[contrib(r) for r in head_results(l, trace["z"][l][0, pos])] for l in range(layers)]),
           "dla.attn_bias": np.array([0.0 if attn_bias(l) is None else contrib(attn_bias(l)) for l in range(layers)]),
           "dla.mlp": np.array([contrib(trace["mlp_out"][l][0, pos]) for l in range(layers)]),
           "dla.norm_bias": 0.0 if beta is None else float(beta @ direction),
           "dla.head_bias": 0.0 if head_bias is None else float(head_bias[target] - head_bias[foil]),
           "dla.scale": float(scale)}
    ld = float(logits[0, pos, target] - logits[0, pos, foil])
    total = (out["dla.embed"] + out["dla.heads"].sum() + out["dla.attn_bias"].sum() + out["dla.mlp"].sum()
             + out["dla.norm_bias"] + out["dla.head_bias"])
    assert abs(total - ld) < 1e-10, f"the attribution sums to {total}, LD is {ld}"
    out["dla.ld"] = ld
    for key in ("dla.embed", "dla.norm_bias", "dla.head_bias", "dla.scale", "dla.ld"):
        out[key] = np.array([out[key]])
    return out


def metric(logits, pos):
    """The top token and the median-ranked one at pos, as target and foil."""
    order = torch.argsort(logits[0, pos], descending=True)
    return int(order[0]), int(order[len(order) // 2])


def write(name, tensors):
    os.makedirs(OUT_DIR, exist_ok=True)
    write_safetensors(os.path.join(OUT_DIR, "dla_" + name + ".safetensors"), tensors, {"model": name})


def gpt2():
    name = "gpt2"
    cfg, _, W, _ = gp.gpt2_weights(name, "F32", prefix=False, buffers=True, tied_stored=False)
    ids = committed(name, lambda ids: gp.gpt2_forward(cfg, W, ids)[0])
    trace = {}
    logits, _, _ = gp.gpt2_forward(cfg, W, ids, trace)
    e, h = cfg["n_embd"], cfg["n_head"]
    d = e // h
    pos = ids.shape[1] - 1
    target, foil = metric(logits, pos)
    out = dla(trace, logits,
              lambda l, z: [z[i * d:(i + 1) * d] @ W["layers"][l]["c_proj"][0][i * d:(i + 1) * d] for i in range(h)],
              lambda l: W["layers"][l]["c_proj"][1], W["wte"], W["lnf"][0], W["lnf"][1], cfg["layer_norm_epsilon"],
              False, target, foil, pos)
    out.update(lens(trace["resid_pre"] + [trace["resid_final"]], lambda x: gp.gpt2_final_norm(cfg, W, x) @ W["wte"].T))
    write(name, dict(out, input_ids=ids[0].numpy(), metric=np.array([target, foil, pos], dtype=np.int64)))


def parallel(name, weights, forward):
    """GPT-NeoX's and Phi-2's folders (LayerNorm, the attention's dense with a bias, a head with a
    bias or none): weights() gives (cfg, Params, W, tokenizer), forward(cfg, W, ids, trace)."""
    cfg, _, W, _ = weights()
    ids = committed(name, lambda ids: forward(cfg, W, ids)[0])
    trace = {}
    logits, _, _ = forward(cfg, W, ids, trace)
    e, h, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    d = e // h
    head, head_bias = W["head"] if isinstance(W["head"], tuple) else (W["head"], None)
    pos = ids.shape[1] - 1
    target, foil = metric(logits, pos)
    out = dla(trace, logits,
              lambda l, z: [W["layers"][l]["dense"][0][:, i * d:(i + 1) * d] @ z[i * d:(i + 1) * d] for i in range(h)],
              lambda l: W["layers"][l]["dense"][1], head, W["lnf"][0], W["lnf"][1], eps, False, target, foil, pos,
              head_bias=head_bias)
    out.update(lens(trace["resid_pre"] + [trace["resid_final"]],
                    lambda x: gp.layer_norm(x, *W["lnf"], eps) @ head.T + (0 if head_bias is None else head_bias)))
    write(name, dict(out, input_ids=ids[0].numpy(), metric=np.array([target, foil, pos], dtype=np.int64)))


def llama(name, dtype, arch="LlamaForCausalLM", **kw):
    cfg, _, W, _ = gp.llama_weights(name, dtype, arch, **kw)
    ids = committed(name, lambda ids: gp.llama_forward(cfg, W, ids)[0])
    trace = {}
    logits, hidden, _ = gp.llama_forward(cfg, W, ids, trace)
    cap = cfg.get("final_logit_softcapping")
    if cap is not None:  # Gemma 2: the attribution is of the logits before their soft-cap, which is monotone
        logits = hidden @ W["head"].T
    e, h = cfg["hidden_size"], cfg["num_attention_heads"]
    d = cfg.get("head_dim", e // h)
    pos = ids.shape[1] - 1
    target, foil = metric(logits, pos)

    def head_results(l, z):
        writes = [W["layers"][l]["o"][:, i * d:(i + 1) * d] @ z[i * d:(i + 1) * d] for i in range(h)]
        if "attn_out_norm" in W["layers"][l]:  # Gemma 3's post_attention_layernorm, its scale frozen
            y = trace["attn_out"][l][0, pos]
            s = 1 / torch.sqrt(y.pow(2).mean() + cfg["rms_norm_eps"])
            writes = [r * s * W["layers"][l]["attn_out_norm"] for r in writes]
        return writes

    out = dla(trace, logits, head_results,
              lambda l: None, W["head"], W["norm"], None, cfg["rms_norm_eps"], True, target, foil, pos)

    def unembed(x):  # the model's output stack: the final norm, the head and the soft-cap (Gemma 2)
        z = gp.llama_rms(cfg, x, W["norm"]) @ W["head"].T
        return z if cap is None else cap * torch.tanh(z / cap)
    out.update(lens(trace["resid_pre"] + [trace["resid_final"]], unembed))
    write(name, dict(out, input_ids=ids[0].numpy(), metric=np.array([target, foil, pos], dtype=np.int64)))


def bert():
    name = "bert"
    cfg, _, W = gp.bert_weights(name, "F32", old_names=False)
    exp, _ = read_safetensors(os.path.join(gp.OUT_DIR, name, "expected.safetensors"))
    ids = torch.from_numpy(exp["input_ids"].astype(np.int64))
    am = torch.from_numpy(exp["attention_mask"].astype(np.int64))
    types = torch.from_numpy(exp["token_type_ids"].astype(np.int64))
    err = np.abs(gp.bert_forward(cfg, W, ids, am, types)[0].numpy() - exp["logits"]).max()
    assert err < 1e-12, f"{name}: the rebuilt model differs from the committed folder by {err}"
    ids = ids[:1]  # its first sequence, unpadded, with token types 0 (the lens gives none)
    trace = {}
    gp.bert_forward(cfg, W, ids, torch.ones_like(ids), torch.zeros_like(ids), trace)
    out = lens(trace["resid_pre"] + [trace["resid_final"]], lambda x: gp.bert_head(cfg, W, x))
    write(name, dict(out, input_ids=ids[0].numpy()))


def main():
    torch.set_default_dtype(torch.float64)
    gpt2()
    llama("llama", "F32", kv_heads=2, tied=False)
    llama("llama3-bf16", "BF16", kv_heads=1, tied=True,
          scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8})
    # Qwen3's q_norm and k_norm, and heads of 8 in a hidden size of 16 (h·d = 32 ≠ d_model).
    llama("qwen3-wide", "F32", arch="Qwen3ForCausalLM", kv_heads=2, tied=False, head_dim=8)
    # Gemma: GeGLU, embeddings scaled by √d_model, norm gains 1 + w, one K/V head.
    llama("gemma", "F32", arch="GemmaForCausalLM", kv_heads=1, tied=True, head_dim=8)
    # Phi-3: fused qkv_proj and gate_up_proj, half of each head rotated, a window of 4, bf16.
    llama("phi3", "BF16", arch="Phi3ForCausalLM", kv_heads=2, tied=False, window=4)
    # Gemma 2: soft-capped scores and logits, sandwich norms, sliding layers.
    llama("gemma2", "F32", arch="Gemma2ForCausalLM", kv_heads=2, tied=True, window=4, head_dim=8)
    # Gemma 3: each head's write through post_attention_layernorm at its frozen scale.
    llama("gemma3", "BF16", arch="Gemma3ForCausalLM", kv_heads=2, tied=True, window=4, head_dim=8)
    # OLMo 2: no input norms, each head's write through post_attention_layernorm at its frozen
    # scale, qk-norm across the heads.
    llama("olmo2", "F32", arch="Olmo2ForCausalLM", kv_heads=2, tied=False)
    # Mixtral: the MLP's part is its experts' weighted sum.
    llama("mixtral", "F32", arch="MixtralForCausalLM", kv_heads=2, tied=False)
    # Pythia (GPT-NeoX): the MLP parallel to the attention, LayerNorm with biases, float16.
    parallel("pythia", lambda: gp.neox_weights("pythia", "F16", parallel=True, rotary_pct=0.25, buffers=False), gp.neox_forward)
    # Phi-2: one LayerNorm for the parallel attention and MLP, a head with a bias, float16.
    parallel("phi2", lambda: gp.phi_weights("phi2", "F16"), gp.phi_forward)
    bert()


if __name__ == "__main__":
    main()
