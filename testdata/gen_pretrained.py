#!/usr/bin/env python3
"""Generate tiny Hugging Face checkpoints and their reference outputs for package pretrained.

Run from the repository root with the interpreter that has PyTorch 1.13:

    /usr/bin/python3 testdata/gen_pretrained.py

The references' last bits depend on PyTorch's BLAS: the committed outputs were made with
Debian's reference BLAS; with OpenBLAS installed, add
LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/blas:/usr/lib/x86_64-linux-gnu/lapack to reproduce
them bit for bit.

Hugging Face's transformers library is not installable here, so each architecture's forward pass
is written below in float64 PyTorch after Hugging Face's own modeling code (read through the
project's search tool): modeling_gpt2.py (GPT2LMHeadModel), modeling_gpt_neox.py (GPTNeoXForCausalLM: query_key_value's
rows per head [q; k; v], partial rotary, the MLP parallel to the attention or after it),
modeling_phi.py (PhiForCausalLM: the attention and the MLP in parallel from one LayerNorm, partial
rotary, biases everywhere, the head's too), modeling_stablelm.py (StableLmForCausalLM: LayerNorm,
SwiGLU, partial rotary, q/k/v biases),
modeling_bert.py (BertForMaskedLM), modeling_distilbert.py (DistilBertForMaskedLM: BERT's blocks
under other names, no token types), modeling_roberta.py (RobertaForMaskedLM: positions numbered
after the padding token's, lm_head),
modeling_llama.py (LlamaForCausalLM), modeling_qwen2.py and modeling_mistral.py (the same layout
with q/k/v biases, and a sliding window from masking_utils.sliding_window_overlay:
key j is visible to query i when i - W < j <= i), modeling_qwen3.py (q_norm and k_norm: an RMSNorm
of each head's query and key, before the rotation), modeling_gemma.py (GemmaRMSNorm's 1 + weight,
the embeddings times hidden_size**0.5 rounded to float32, the GeGLU network with
gelu_pytorch_tanh), modeling_gemma2.py (Gemma's, plus the attention's and the MLP's outputs
normalised before they join the stream, sliding layers 0, 2, … between full ones, scores scaled
by query_pre_attn_scalar**-0.5 and soft-capped to c·tanh(s/c) before the mask, and the logits
soft-capped likewise), modeling_gemma3.py (Gemma's, plus q_norm and k_norm, the attention's and the
MLP's outputs normalised before they join the stream, sliding_attention layers with their own
window and rope_local_base_freq between full_attention ones whose rotary may be linearly scaled,
scores scaled by query_pre_attn_scalar**-0.5), modeling_phi3.py (qkv_proj and gate_up_proj fused, partial_rotary_factor: the
first int(head_dim · factor) features of each head rotated, a sliding window as Mistral's),
modeling_smollm3.py (Llama's, with NoPE layers that skip the rotary and, with use_sliding_window,
slide), modeling_gptj.py (GPTJForCausalLM: the attention and the MLP in parallel from one ln_1,
rotate_every_two on the first rotary_dim features of each head, a biased lm_head),
modeling_olmo2.py (Olmo2ForCausalLM: no input norms, the attention's and the MLP's outputs
normalised, q_norm and k_norm over the whole projections), modeling_olmo3.py (OLMo 2's blocks,
three sliding layers of four, rope_scaling on the full layers only), modeling_olmoe.py (OlmoeForCausalLM:
Llama's blocks with OLMo 2's q_norm and k_norm and a mixture of experts),
modeling_gpt_bigcode.py (GPTBigCodeForCausalLM: GPT-2's blocks with multi-query attention),
modeling_starcoder2.py (Starcoder2ForCausalLM: LayerNorm, c_fc/c_proj around gelu_pytorch_tanh,
biases everywhere, a sliding window over every layer), modeling_falcon.py (FalconForCausalLM:
query_key_value split as _split_heads splits it, the parallel block), and
modeling_rope_utils.py's YaRN (_compute_yarn_parameters) for Qwen3's long-context config.

For every model in MODELS this writes testdata/pretrained/<name>/ in Hugging Face's layout:
config.json and model.safetensors (or model.safetensors.index.json and two shards), with the
tensor names, dtypes and variants real folders have (prefix or not, GPT-2's attn.bias buffers,
BERT's old gamma/beta names, a tied head left out or stored). expected.safetensors holds the input
ids (I64 [B, T]), the attention mask (I64 [B, T]; BERT and padded batches), the logits (F64
[B, T, V]), the final hidden states (F64 [B, T, E], after the final norm where the model has one)
and the attention weights of every layer, attentions.<l> (F64 [B, H, T, T]). Weights stored in
F16 or BF16 are used by the reference as their rounded values, so the reference is exact for the
weights as stored. Rotary angles are exact float64 (Hugging Face computes them in float32; the
difference at these positions is below 1e-6).

Each family's weights (gpt2_weights, bert_weights, llama_weights: the same draws for the same
folder name) and its forward (gpt2_forward, bert_forward, llama_forward, which can record the
residual stream in a trace dict, and take a hook that may replace the residual stream, the
attention weights or the heads' outputs: see run_hook) are functions of their own, so that
gen_circuits_dla.py and gen_circuits_patch.py run the same forwards on the same weights.
"""

import json
import math
import os
import sys
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import BF16, write_safetensors  # noqa: E402  the project's one safetensors writer
from gen_sdpa import apply_rope  # noqa: E402  the one rotary (Hugging Face's rotate_half and Llama 3 scaling)

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained")

torch.set_num_threads(1)


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


class Params:
    """Draws weights, stores them under Hugging Face names in the chosen dtype, and hands the
    reference their stored values as float64 tensors."""

    def __init__(self, name, dtype):
        self.rng, self.dtype, self.stored = rng_for(name), dtype, {}

    def draw(self, name, shape, std=0.2, mean=0.0):
        x = (mean + std * self.rng.standard_normal(shape)).astype(np.float32)
        return self.put(name, x)

    def layer_norm(self, prefix, e, weight="weight", bias="bias"):
        """A LayerNorm's weight (near 1) and bias, prefix.weight and prefix.bias (or the names given)."""
        return self.draw(f"{prefix}.{weight}", (e,), 0.1, 1.0), self.draw(f"{prefix}.{bias}", (e,), 0.1)

    def linear(self, prefix, i, o):
        """An nn.Linear's weight [o, i] and bias, prefix.weight and prefix.bias."""
        return self.draw(prefix + ".weight", (o, i)), self.draw(prefix + ".bias", (o,), 0.1)

    def put(self, name, x):
        if self.dtype == "BF16":
            b = BF16(x)
            self.stored[name] = b
            x = b.values()
        elif self.dtype == "F16":
            x = x.astype(np.float16)
            self.stored[name] = x
        else:
            self.stored[name] = x
        return torch.from_numpy(np.asarray(x, dtype=np.float64).copy())


def run_hook(hook, point, layer, x):
    """Calls hook(point, layer, x) when there is a hook: it may return a tensor to use instead of
    x (activation patching), or None to leave x as it is. The points (TransformerLens's names in
    brackets):

      "resid_pre", l    the residual stream entering block l [B,T,E]          (blocks.l.hook_resid_pre)
      "resid_final", L  the last block's output, before the final norm [B,T,E] (blocks.L-1.hook_resid_post)
      "pattern", l      block l's attention weights [B,H,T,S]                  (blocks.l.attn.hook_pattern)
      "z", l            block l's head outputs A·V [B,H,T,d], before W_O       (blocks.l.attn.hook_z)

    With grouped K/V heads, "pattern" and "z" are per query head, after repeat_kv. A trace
    records the values after the hook."""
    if hook is None:
        return x
    y = hook(point, layer, x)
    return x if y is None else y


def softmax_attention(q, k, v, mask, hook=None, layer=None, scale=None, softcap=None):
    """q [B,H,T,d], k, v [B,H,S,d]; mask [B or 1, 1 or H, T, S] bool, True = visible; the scores
    scaled by scale, or 1/sqrt(d), then capped to softcap·tanh(s/softcap) (Gemma 2's
    eager_attention_forward) before the mask."""
    scores = q @ k.transpose(-1, -2)
    scores = scores / math.sqrt(q.shape[-1]) if scale is None else scores * scale
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    w = run_hook(hook, "pattern", layer, torch.nan_to_num(w, nan=0.0))
    return run_hook(hook, "z", layer, w @ v), w


def layer_norm(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def split_heads(x, h):
    b, t, e = x.shape
    return x.view(b, t, h, e // h).transpose(1, 2)


def merge_heads(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


# ---------------------------------------------------------------- GPT-2


def gpt2_weights(name, dtype, prefix, buffers, tied_stored):
    """Draws the GPT-2 folder name's weights: (cfg, Params, weights W, tokenizer)."""
    tok, vocab_size = gpt2_tokenizer()
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": vocab_size, "n_positions": 16,
           "n_embd": 16, "n_layer": 2, "n_head": 4, "n_inner": None, "activation_function": "gelu_new",
           "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "torch_dtype": torch_dtype(dtype)}
    p = Params(name, dtype)
    e, v, npos, nl, h = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"], cfg["n_head"]
    pre = "transformer." if prefix else ""
    wte = p.draw(pre + "wte.weight", (v, e), 0.5)
    wpe = p.draw(pre + "wpe.weight", (npos, e), 0.3)
    layers = []
    for l in range(nl):
        s = f"{pre}h.{l}."
        layers.append({
            "ln1": (p.draw(s + "ln_1.weight", (e,), 0.1, 1.0), p.draw(s + "ln_1.bias", (e,), 0.1)),
            "c_attn": (p.draw(s + "attn.c_attn.weight", (e, 3 * e)), p.draw(s + "attn.c_attn.bias", (3 * e,), 0.1)),
            "c_proj": (p.draw(s + "attn.c_proj.weight", (e, e)), p.draw(s + "attn.c_proj.bias", (e,), 0.1)),
            "ln2": (p.draw(s + "ln_2.weight", (e,), 0.1, 1.0), p.draw(s + "ln_2.bias", (e,), 0.1)),
            "c_fc": (p.draw(s + "mlp.c_fc.weight", (e, 4 * e)), p.draw(s + "mlp.c_fc.bias", (4 * e,), 0.1)),
            "mlp_proj": (p.draw(s + "mlp.c_proj.weight", (4 * e, e)), p.draw(s + "mlp.c_proj.bias", (e,), 0.1)),
        })
        if buffers:  # the causal-mask buffers old GPT-2 checkpoints carry
            tri = np.tril(np.ones((npos, npos), dtype=np.float32)).reshape(1, 1, npos, npos)
            p.stored[s + "attn.bias"] = tri.astype(np.bool_)
            p.stored[s + "attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    lnf = (p.draw(pre + "ln_f.weight", (e,), 0.1, 1.0), p.draw(pre + "ln_f.bias", (e,), 0.1))
    if tied_stored:
        p.stored["lm_head.weight"] = p.stored[pre + "wte.weight"]
    cfg["eos_token_id"] = cfg["bos_token_id"] = vocab_size - 1
    return cfg, p, {"wte": wte, "wpe": wpe, "layers": layers, "lnf": lnf}, tok


def gpt2_forward(cfg, W, ids, trace=None, hook=None):
    """GPT2LMHeadModel's forward of ids [B, T]: (logits, hidden, attentions). When trace is a
    dict, it also records per block the stream entering it (resid_pre), the heads' outputs
    before c_proj (z [B, T, E]), the stream after the attention (resid_mid) and the MLP's output
    (mlp_out), and the last block's output (resid_final)."""
    e, h = cfg["n_embd"], cfg["n_head"]
    wte, wpe = W["wte"], W["wpe"]
    b, t = ids.shape
    x = wte[ids] + wpe[torch.arange(t)]
    mask = torch.ones(t, t, dtype=torch.bool).tril().view(1, 1, t, t)
    attns = []
    for l, L in enumerate(W["layers"]):
        x = run_hook(hook, "resid_pre", l, x)
        record(trace, "resid_pre", x)
        a = layer_norm(x, *L["ln1"], cfg["layer_norm_epsilon"])
        qkv = a @ L["c_attn"][0] + L["c_attn"][1]  # Conv1D: x·W + b, W [in, out]
        q, k, vv = qkv.split(e, dim=-1)
        o, w = softmax_attention(split_heads(q, h), split_heads(k, h), split_heads(vv, h), mask, hook, l)
        attns.append(w)
        record(trace, "z", merge_heads(o))
        x = x + merge_heads(o) @ L["c_proj"][0] + L["c_proj"][1]
        record(trace, "resid_mid", x)
        m = layer_norm(x, *L["ln2"], cfg["layer_norm_epsilon"])
        f = gelu_new(m @ L["c_fc"][0] + L["c_fc"][1]) @ L["mlp_proj"][0]
        record(trace, "mlp_out", f + L["mlp_proj"][1])
        x = x + f + L["mlp_proj"][1]
    x = run_hook(hook, "resid_final", len(W["layers"]), x)
    if trace is not None:
        trace["resid_final"] = x
    hidden = gpt2_final_norm(cfg, W, x)
    return hidden @ W["wte"].T, hidden, attns


def gpt2_final_norm(cfg, W, x):
    """GPT-2's ln_f."""
    return layer_norm(x, *W["lnf"], cfg["layer_norm_epsilon"])


def gpt2(name, dtype, prefix, buffers, tied_stored, shards):
    cfg, p, W, tok = gpt2_weights(name, dtype, prefix, buffers, tied_stored)
    ids = torch.from_numpy(p.rng.integers(0, cfg["vocab_size"], size=(2, 9)))
    logits, hidden, attns = gpt2_forward(cfg, W, ids)
    write_model(name, cfg, p.stored, shards, ids, None, logits, hidden, attns, tokenizer=tok)


def record(trace, key, x):
    """Appends x to trace[key] when trace is a dict."""
    if trace is not None:
        trace.setdefault(key, []).append(x)


# ---------------------------------------------------------------- GPT-NeoX (Pythia)


def neox_weights(name, dtype, parallel, rotary_pct, buffers):
    """Draws the GPTNeoXForCausalLM folder name's weights: (cfg, Params, weights W, tokenizer);
    with buffers, the attention buffers older checkpoints carry."""
    tok, vocab_size = gpt2_tokenizer()  # Pythia's tokenizer is byte-level BPE too
    cfg = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": vocab_size,
           "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2,
           "max_position_embeddings": 64, "layer_norm_eps": 1e-5, "rotary_pct": rotary_pct, "rotary_emb_base": 100.0,
           "use_parallel_residual": parallel, "hidden_act": "gelu", "tie_word_embeddings": False,
           "torch_dtype": torch_dtype(dtype), "bos_token_id": vocab_size - 1, "eos_token_id": vocab_size - 1}
    p = Params(name, dtype)
    e, v, f, npos = cfg["hidden_size"], vocab_size, cfg["intermediate_size"], cfg["max_position_embeddings"]
    emb = p.draw("gpt_neox.embed_in.weight", (v, e), 0.5)
    layers = []
    for l in range(cfg["num_hidden_layers"]):
        s = f"gpt_neox.layers.{l}."
        layers.append({"ln1": p.layer_norm(s + "input_layernorm", e), "ln2": p.layer_norm(s + "post_attention_layernorm", e),
                       "qkv": p.linear(s + "attention.query_key_value", e, 3 * e), "dense": p.linear(s + "attention.dense", e, e),
                       "fc1": p.linear(s + "mlp.dense_h_to_4h", e, f), "fc2": p.linear(s + "mlp.dense_4h_to_h", f, e)})
        if buffers:
            p.stored[s + "attention.bias"] = np.tril(np.ones((npos, npos), dtype=np.bool_)).reshape(1, 1, npos, npos)
            p.stored[s + "attention.masked_bias"] = np.array(-1e9, dtype=np.float32)
            d = e // cfg["num_attention_heads"]
            rot = int(d * rotary_pct)
            p.stored[s + "attention.rotary_emb.inv_freq"] = (1.0 / 100.0 ** (np.arange(0, rot, 2) / rot)).astype(np.float32)
    lnf = (p.draw("gpt_neox.final_layer_norm.weight", (e,), 0.1, 1.0), p.draw("gpt_neox.final_layer_norm.bias", (e,), 0.1))
    head = p.draw("embed_out.weight", (v, e), 0.5)
    return cfg, p, {"emb": emb, "layers": layers, "lnf": lnf, "head": head}, tok


def partial_rope_start(cfg, W, ids, theta, fraction):
    """What the LayerNorm decoders' forwards (GPT-NeoX, Phi, StableLM) start from: the head size
    d, the sizes b, t, the rotary of the first fraction of each head with base theta, the causal
    mask and the token embeddings."""
    d = cfg["hidden_size"] // cfg["num_attention_heads"]
    b, t = ids.shape
    rope = (theta, int(d * fraction), "half", 0)
    mask = torch.ones(t, t, dtype=torch.bool).tril().view(1, 1, t, t)
    return d, b, t, rope, mask, W["emb"][ids]


def neox_forward(cfg, W, ids, trace=None, hook=None):
    """GPTNeoXForCausalLM's forward of ids [B, T]: (logits, hidden, attentions), recording and
    hooking as llama_forward does. query_key_value's output is [h, 3, d] per position: head i's
    query, key and value side by side; the first rotary_pct of each head's query and key rotate
    (rotate_half, base rotary_emb_base); with use_parallel_residual the MLP reads the block's
    input, x + attn(ln1(x)) + mlp(ln2(x))."""
    h, eps = cfg["num_attention_heads"], cfg["layer_norm_eps"]
    d, b, t, rope, mask, x = partial_rope_start(cfg, W, ids, cfg["rotary_emb_base"], cfg["rotary_pct"])
    attns = []
    for l, L in enumerate(W["layers"]):
        x = run_hook(hook, "resid_pre", l, x)
        record(trace, "resid_pre", x)
        a = layer_norm(x, *L["ln1"], eps)
        qkv = (a @ L["qkv"][0].T + L["qkv"][1]).view(b, t, h, 3 * d)
        q, k, vv = (qkv[..., i * d:(i + 1) * d].permute(0, 2, 1, 3) for i in range(3))
        if rope[1] > 0:
            q, k = apply_rope(q, torch.arange(t), rope, None), apply_rope(k, torch.arange(t), rope, None)
        o, w = softmax_attention(q, k, vv, mask, hook, l)
        attns.append(w)
        record(trace, "z", merge_heads(o))
        y = merge_heads(o) @ L["dense"][0].T + L["dense"][1]
        record(trace, "attn_out", y)
        m = layer_norm(x if cfg["use_parallel_residual"] else x + y, *L["ln2"], eps)
        x = x + y
        record(trace, "resid_mid", x)
        f = gelu(m @ L["fc1"][0].T + L["fc1"][1]) @ L["fc2"][0].T + L["fc2"][1]
        record(trace, "mlp_out", f)
        x = x + f
    x = run_hook(hook, "resid_final", len(W["layers"]), x)
    if trace is not None:
        trace["resid_final"] = x
    hidden = layer_norm(x, *W["lnf"], eps)
    return hidden @ W["head"].T, hidden, attns


def neox(name, dtype, parallel, rotary_pct, buffers):
    cfg, p, W, tok = neox_weights(name, dtype, parallel, rotary_pct, buffers)
    ids = torch.from_numpy(p.rng.integers(0, cfg["vocab_size"], size=(2, 9)))
    logits, hidden, attns = neox_forward(cfg, W, ids)
    write_model(name, cfg, p.stored, False, ids, None, logits, hidden, attns, tokenizer=tok)


# ---------------------------------------------------------------- Phi-2


def phi_weights(name, dtype):
    """Draws the PhiForCausalLM folder name's weights: (cfg, Params, weights W, tokenizer)."""
    tok, vocab_size = gpt2_tokenizer()  # Phi's tokenizer is GPT-2's byte-level BPE (CodeGen's)
    cfg = {"architectures": ["PhiForCausalLM"], "model_type": "phi", "vocab_size": vocab_size, "hidden_size": 16,
           "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": None,
           "max_position_embeddings": 64, "layer_norm_eps": 1e-5, "partial_rotary_factor": 0.5, "rope_theta": 100.0,
           "hidden_act": "gelu_new", "qk_layernorm": False, "tie_word_embeddings": False,
           "torch_dtype": torch_dtype(dtype), "bos_token_id": vocab_size - 1, "eos_token_id": vocab_size - 1}
    p = Params(name, dtype)
    e, v, f = cfg["hidden_size"], vocab_size, cfg["intermediate_size"]
    emb = p.draw("model.embed_tokens.weight", (v, e), 0.5)
    layers = []
    for l in range(cfg["num_hidden_layers"]):
        s = f"model.layers.{l}."
        layers.append({"ln": p.layer_norm(s + "input_layernorm", e),
                       "q": p.linear(s + "self_attn.q_proj", e, e), "k": p.linear(s + "self_attn.k_proj", e, e),
                       "v": p.linear(s + "self_attn.v_proj", e, e), "dense": p.linear(s + "self_attn.dense", e, e),
                       "fc1": p.linear(s + "mlp.fc1", e, f), "fc2": p.linear(s + "mlp.fc2", f, e)})
    lnf = (p.draw("model.final_layernorm.weight", (e,), 0.1, 1.0), p.draw("model.final_layernorm.bias", (e,), 0.1))
    head = (p.draw("lm_head.weight", (v, e), 0.5), p.draw("lm_head.bias", (v,), 0.3))
    return cfg, p, {"emb": emb, "layers": layers, "lnf": lnf, "head": head}, tok


def phi_forward(cfg, W, ids, trace=None, hook=None):
    """PhiForCausalLM's forward of ids [B, T]: (logits, hidden, attentions), recording and hooking
    as llama_forward does: x + attn(ln(x)) + mlp(ln(x)), one LayerNorm for both, the first
    partial_rotary_factor of each head rotated (rotate_half), the head with a bias."""
    h, eps = cfg["num_attention_heads"], cfg["layer_norm_eps"]
    d, _, t, rope, mask, x = partial_rope_start(cfg, W, ids, cfg["rope_theta"], cfg["partial_rotary_factor"])
    attns = []
    for l, L in enumerate(W["layers"]):
        x = run_hook(hook, "resid_pre", l, x)
        record(trace, "resid_pre", x)
        a = layer_norm(x, *L["ln"], eps)
        q, k, vv = (split_heads(a @ L[n][0].T + L[n][1], h) for n in ("q", "k", "v"))
        q, k = apply_rope(q, torch.arange(t), rope, None), apply_rope(k, torch.arange(t), rope, None)
        o, w = softmax_attention(q, k, vv, mask, hook, l)
        attns.append(w)
        record(trace, "z", merge_heads(o))
        y = merge_heads(o) @ L["dense"][0].T + L["dense"][1]
        record(trace, "attn_out", y)
        f = gelu_new(a @ L["fc1"][0].T + L["fc1"][1]) @ L["fc2"][0].T + L["fc2"][1]
        x = x + y
        record(trace, "resid_mid", x)
        record(trace, "mlp_out", f)
        x = x + f
    x = run_hook(hook, "resid_final", len(W["layers"]), x)
    if trace is not None:
        trace["resid_final"] = x
    hidden = layer_norm(x, *W["lnf"], eps)
    return hidden @ W["head"][0].T + W["head"][1], hidden, attns


def gptj(name, dtype):
    """A GPTJForCausalLM folder (GPT-J-6B's layout) and its reference: GPT-2's config keys, the
    attention and the MLP in parallel from one ln_1, x + attn(ln_1(x)) + mlp(ln_1(x)), rotary on
    the first rotary_dim features of each head in GPT-J's interleaved layout (rotate_every_two,
    base 10000), q/k/v/out_proj without biases, fc_in and fc_out with them, lm_head with one; the
    attention's mask buffers old checkpoints carry."""
    tok, vocab_size = gpt2_tokenizer()
    cfg = {"architectures": ["GPTJForCausalLM"], "model_type": "gptj", "vocab_size": vocab_size, "n_embd": 16,
           "n_layer": 2, "n_head": 2, "n_positions": 64, "rotary_dim": 4, "n_inner": None,
           "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False,
           "torch_dtype": torch_dtype(dtype), "bos_token_id": vocab_size - 1, "eos_token_id": vocab_size - 1}
    p = Params(name, dtype)
    e, v, h, npos = cfg["n_embd"], vocab_size, cfg["n_head"], cfg["n_positions"]
    f = 4 * e
    emb = p.draw("transformer.wte.weight", (v, e), 0.5)
    layers = []
    for l in range(cfg["n_layer"]):
        s = f"transformer.h.{l}."
        L = {"ln": p.layer_norm(s + "ln_1", e)}
        for n in ("q", "k", "v", "out"):
            L[n] = p.draw(s + f"attn.{n}_proj.weight", (e, e))
        L["fc_in"], L["fc_out"] = p.linear(s + "mlp.fc_in", e, f), p.linear(s + "mlp.fc_out", f, e)
        p.stored[s + "attn.bias"] = np.tril(np.ones((npos, npos), dtype=np.bool_)).reshape(1, 1, npos, npos)
        p.stored[s + "attn.masked_bias"] = np.array(-1e9, dtype=np.float32)
        layers.append(L)
    lnf = p.layer_norm("transformer.ln_f", e)
    head = p.linear("lm_head", e, v)
    ids = torch.from_numpy(p.rng.integers(0, v, size=(2, 10)))
    t = ids.shape[1]
    rope = (10000.0, cfg["rotary_dim"], "interleaved", 0)
    mask = torch.ones(t, t, dtype=torch.bool).tril().view(1, 1, t, t)
    x, attns = emb[ids], []
    for L in layers:
        a = layer_norm(x, *L["ln"], cfg["layer_norm_epsilon"])
        q, k, vv = (split_heads(a @ L[n].T, h) for n in ("q", "k", "v"))
        q, k = apply_rope(q, torch.arange(t), rope, None), apply_rope(k, torch.arange(t), rope, None)
        o, w = softmax_attention(q, k, vv, mask)
        attns.append(w)
        mlp = gelu_new(a @ L["fc_in"][0].T + L["fc_in"][1]) @ L["fc_out"][0].T + L["fc_out"][1]
        x = x + merge_heads(o) @ L["out"].T + mlp
    hidden = layer_norm(x, *lnf, cfg["layer_norm_epsilon"])
    logits = hidden @ head[0].T + head[1]
    write_model(name, cfg, p.stored, False, ids, None, logits, hidden, attns, tokenizer=tok)


def stablelm_weights(name, dtype):
    """Draws the StableLmForCausalLM folder name's weights, StableLM 2's form: q/k/v biases, o_proj
    without, SwiGLU, a quarter of each head rotated, two K/V heads for four query heads."""
    tok, vocab_size = gpt2_tokenizer()
    cfg = {"architectures": ["StableLmForCausalLM"], "model_type": "stablelm", "vocab_size": vocab_size, "hidden_size": 32,
           "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 64, "layer_norm_eps": 1e-5, "partial_rotary_factor": 0.25, "rope_theta": 100.0,
           "hidden_act": "silu", "use_qkv_bias": True, "qk_layernorm": False, "use_parallel_residual": False,
           "tie_word_embeddings": False, "torch_dtype": torch_dtype(dtype), "bos_token_id": vocab_size - 1,
           "eos_token_id": vocab_size - 1}
    p = Params(name, dtype)
    e, v, f, kvd = cfg["hidden_size"], vocab_size, cfg["intermediate_size"], 2 * 8
    emb = p.draw("model.embed_tokens.weight", (v, e), 0.5)
    layers = []
    for l in range(cfg["num_hidden_layers"]):
        s = f"model.layers.{l}."
        layers.append({"ln1": p.layer_norm(s + "input_layernorm", e), "ln2": p.layer_norm(s + "post_attention_layernorm", e),
                       "q": p.linear(s + "self_attn.q_proj", e, e), "k": p.linear(s + "self_attn.k_proj", e, kvd),
                       "v": p.linear(s + "self_attn.v_proj", e, kvd), "o": p.draw(s + "self_attn.o_proj.weight", (e, e)),
                       "gate": p.draw(s + "mlp.gate_proj.weight", (f, e)), "up": p.draw(s + "mlp.up_proj.weight", (f, e)),
                       "down": p.draw(s + "mlp.down_proj.weight", (e, f))})
    lnf = p.layer_norm("model.norm", e)
    head = p.draw("lm_head.weight", (v, e), 0.5)
    return cfg, p, {"emb": emb, "layers": layers, "lnf": lnf, "head": head}, tok


def gqa_attention(a, L, h, kvh, rope, mask):
    """The attention of a LayerNorm decoder's block (StableLM's, StarCoder2's) on its normalised
    input a [B, T, E]: q, k and v Linears with biases (L["q"], L["k"], L["v"], each (weight,
    bias)), the rotary on q and k, repeat_kv for the kvh K/V heads. Returns the heads' outputs
    merged [B, T, E] (before o_proj) and the weights."""
    t = a.shape[1]
    q = split_heads(a @ L["q"][0].T + L["q"][1], h)
    k, vv = (split_heads(a @ L[n][0].T + L[n][1], kvh) for n in ("k", "v"))
    q, k = apply_rope(q, torch.arange(t), rope, None), apply_rope(k, torch.arange(t), rope, None)
    k, vv = k.repeat_interleave(h // kvh, dim=1), vv.repeat_interleave(h // kvh, dim=1)
    o, w = softmax_attention(q, k, vv, mask)
    return merge_heads(o), w


def stablelm_forward(cfg, W, ids):
    """StableLmForCausalLM's forward of ids [B, T] (use_parallel_residual false): x + attn(ln1(x)),
    then + mlp(ln2(·)), the first partial_rotary_factor of each head rotated (rotate_half),
    repeat_kv for the grouped K/V heads."""
    h, kvh, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["layer_norm_eps"]
    _, _, t, rope, mask, x = partial_rope_start(cfg, W, ids, cfg["rope_theta"], cfg["partial_rotary_factor"])
    attns = []
    for L in W["layers"]:
        a = layer_norm(x, *L["ln1"], eps)
        z, w = gqa_attention(a, L, h, kvh, rope, mask)
        attns.append(w)
        x = x + z @ L["o"].T
        m = layer_norm(x, *L["ln2"], eps)
        gate = m @ L["gate"].T
        x = x + ((gate * torch.sigmoid(gate)) * (m @ L["up"].T)) @ L["down"].T
    hidden = layer_norm(x, *W["lnf"], eps)
    return hidden @ W["head"].T, hidden, attns


def stablelm(name, dtype):
    cfg, p, W, tok = stablelm_weights(name, dtype)
    ids = torch.from_numpy(p.rng.integers(0, cfg["vocab_size"], size=(2, 9)))
    logits, hidden, attns = stablelm_forward(cfg, W, ids)
    write_model(name, cfg, p.stored, False, ids, None, logits, hidden, attns, tokenizer=tok)


def starcoder2(name, dtype):
    """A Starcoder2ForCausalLM folder (StarCoder2's layout) and its reference: LayerNorm of
    norm_epsilon, q/k/v/o_proj and mlp.c_fc/c_proj with biases (use_bias), gelu_pytorch_tanh,
    whole heads rotated, two K/V heads for four query heads, a sliding window of 4 over every
    layer, and the head tied to the embedding (Starcoder2Config's default)."""
    tok, vocab_size = gpt2_tokenizer()
    cfg = {"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2", "vocab_size": vocab_size,
           "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "max_position_embeddings": 64, "norm_epsilon": 1e-5, "rope_theta": 1000.0,
           "hidden_act": "gelu_pytorch_tanh", "use_bias": True, "sliding_window": 4,
           "torch_dtype": torch_dtype(dtype), "bos_token_id": vocab_size - 1, "eos_token_id": vocab_size - 1}
    p = Params(name, dtype)
    e, v, f, h, kvh, eps = 16, vocab_size, 24, 4, 2, cfg["norm_epsilon"]
    d = e // h
    emb = p.draw("model.embed_tokens.weight", (v, e), 0.5)
    layers = []
    for l in range(cfg["num_hidden_layers"]):
        s = f"model.layers.{l}."
        layers.append({"ln1": p.layer_norm(s + "input_layernorm", e), "ln2": p.layer_norm(s + "post_attention_layernorm", e),
                       "q": p.linear(s + "self_attn.q_proj", e, e), "k": p.linear(s + "self_attn.k_proj", e, kvh * d),
                       "v": p.linear(s + "self_attn.v_proj", e, kvh * d), "o": p.linear(s + "self_attn.o_proj", e, e),
                       "fc": p.linear(s + "mlp.c_fc", e, f), "proj": p.linear(s + "mlp.c_proj", f, e)})
    lnf = p.layer_norm("model.norm", e)
    ids = torch.from_numpy(p.rng.integers(0, v, size=(2, 9)))
    t = ids.shape[1]
    rope = (cfg["rope_theta"], 0, "half", 0)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    mask = ((j <= i) & (j > i - cfg["sliding_window"])).view(1, 1, t, t)
    x, attns = emb[ids], []
    for L in layers:
        a = layer_norm(x, *L["ln1"], eps)
        z, w = gqa_attention(a, L, h, kvh, rope, mask)
        attns.append(w)
        x = x + z @ L["o"][0].T + L["o"][1]
        m = layer_norm(x, *L["ln2"], eps)
        x = x + gelu_new(m @ L["fc"][0].T + L["fc"][1]) @ L["proj"][0].T + L["proj"][1]
    hidden = layer_norm(x, *lnf, eps)
    write_model(name, cfg, p.stored, False, ids, None, hidden @ emb.T, hidden, attns, tokenizer=tok)


def gpt_bigcode(name, dtype):
    """A GPTBigCodeForCausalLM folder (StarCoder's and SantaCoder's layout) and its reference after
    modeling_gpt_bigcode.py: GPT-2's config keys and blocks with learned positions, nn.Linear
    weights [out, in], multi-query attention (c_attn's rows: every query head, then one key and
    one value head), gelu_pytorch_tanh, the head tied to wte."""
    tok, vocab_size = gpt2_tokenizer()
    cfg = {"architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode", "vocab_size": vocab_size,
           "n_positions": 32, "n_embd": 16, "n_layer": 2, "n_head": 4, "n_inner": None,
           "activation_function": "gelu_pytorch_tanh", "layer_norm_epsilon": 1e-5, "multi_query": True,
           "scale_attn_weights": True, "torch_dtype": torch_dtype(dtype), "bos_token_id": vocab_size - 1,
           "eos_token_id": vocab_size - 1}
    p = Params(name, dtype)
    e, v, h, npos, eps = cfg["n_embd"], vocab_size, cfg["n_head"], cfg["n_positions"], cfg["layer_norm_epsilon"]
    d, f = e // h, 4 * e
    wte = p.draw("transformer.wte.weight", (v, e), 0.5)
    wpe = p.draw("transformer.wpe.weight", (npos, e), 0.3)
    layers = []
    for l in range(cfg["n_layer"]):
        s = f"transformer.h.{l}."
        layers.append({"ln1": p.layer_norm(s + "ln_1", e), "c_attn": p.linear(s + "attn.c_attn", e, e + 2 * d),
                       "c_proj": p.linear(s + "attn.c_proj", e, e), "ln2": p.layer_norm(s + "ln_2", e),
                       "c_fc": p.linear(s + "mlp.c_fc", e, f), "mlp_proj": p.linear(s + "mlp.c_proj", f, e)})
    lnf = p.layer_norm("transformer.ln_f", e)
    ids = torch.from_numpy(p.rng.integers(0, v, size=(2, 9)))
    b, t = ids.shape
    mask = torch.ones(t, t, dtype=torch.bool).tril().view(1, 1, t, t)
    x, attns = wte[ids] + wpe[torch.arange(t)], []
    for L in layers:
        a = layer_norm(x, *L["ln1"], eps)
        qkv = a @ L["c_attn"][0].T + L["c_attn"][1]
        q = split_heads(qkv[..., :e], h)
        k, vv = (qkv[..., e + i * d:e + (i + 1) * d].unsqueeze(1).expand(b, h, t, d) for i in range(2))
        o, w = softmax_attention(q, k, vv, mask)
        attns.append(w)
        x = x + merge_heads(o) @ L["c_proj"][0].T + L["c_proj"][1]
        m = layer_norm(x, *L["ln2"], eps)
        x = x + gelu_new(m @ L["c_fc"][0].T + L["c_fc"][1]) @ L["mlp_proj"][0].T + L["mlp_proj"][1]
    hidden = layer_norm(x, *lnf, eps)
    write_model(name, cfg, p.stored, False, ids, None, hidden @ wte.T, hidden, attns, tokenizer=tok)


def falcon(name, dtype, new_arch):
    """A FalconForCausalLM folder and its reference after modeling_falcon.py. Falcon-7B's form:
    multi_query (query_key_value's rows: every query head, then one key and one value head), the
    attention and the MLP in parallel from one input_layernorm, no biases. With new_arch
    (Falcon-40B's and 180B's new_decoder_architecture): num_kv_heads groups of rows [the group's
    query heads; its key; its value] (FalconAttention._split_heads), ln_attn and ln_mlp
    (num_ln_in_parallel_attn left out: 2), biases. Rotary in the rotate-half layout, the exact
    GELU, the head tied to the embedding."""
    tok, vocab_size = gpt2_tokenizer()
    h, kv = 4, 2 if new_arch else 1
    cfg = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "vocab_size": vocab_size, "hidden_size": 16,
           "num_hidden_layers": 2, "num_attention_heads": h, "max_position_embeddings": 64, "layer_norm_epsilon": 1e-5,
           "rope_theta": 1000.0, "bias": new_arch, "alibi": False, "parallel_attn": True,
           "new_decoder_architecture": new_arch, "multi_query": not new_arch, "torch_dtype": torch_dtype(dtype),
           "bos_token_id": vocab_size - 1, "eos_token_id": vocab_size - 1}
    if new_arch:
        cfg["num_kv_heads"] = kv
    p = Params(name, dtype)
    e, v, eps = cfg["hidden_size"], vocab_size, cfg["layer_norm_epsilon"]
    d, f = e // h, 4 * e
    rows = (h + 2 * kv) * d
    emb = p.draw("transformer.word_embeddings.weight", (v, e), 0.5)
    layers = []
    for l in range(cfg["num_hidden_layers"]):
        s = f"transformer.h.{l}."
        L = {"ln_attn": p.layer_norm(s + ("ln_attn" if new_arch else "input_layernorm"), e)}
        if new_arch:
            L["ln_mlp"] = p.layer_norm(s + "ln_mlp", e)
        for key, name_, shape in (("qkv", "self_attention.query_key_value", (rows, e)), ("dense", "self_attention.dense", (e, e)),
                                  ("up", "mlp.dense_h_to_4h", (f, e)), ("down", "mlp.dense_4h_to_h", (e, f))):
            L[key] = (p.draw(s + name_ + ".weight", shape),
                      p.draw(s + name_ + ".bias", shape[:1], 0.1) if new_arch else 0.0)  # no bias: adds 0
        layers.append(L)
    lnf = p.layer_norm("transformer.ln_f", e)
    ids = torch.from_numpy(p.rng.integers(0, v, size=(2, 9)))
    b, t = ids.shape
    rope = (cfg["rope_theta"], 0, "half", 0)
    mask = torch.ones(t, t, dtype=torch.bool).tril().view(1, 1, t, t)
    x, attns = emb[ids], []
    for L in layers:
        a = layer_norm(x, *L["ln_attn"], eps)
        fused = a @ L["qkv"][0].T + L["qkv"][1]
        if new_arch:
            g = fused.view(b, t, kv, h // kv + 2, d)
            q, k, vv = g[:, :, :, :-2], g[:, :, :, [-2]], g[:, :, :, [-1]]
            k, vv = k.expand(q.shape), vv.expand(q.shape)
            q, k, vv = (z.flatten(2, 3).transpose(1, 2) for z in (q, k, vv))
        else:
            g = fused.view(b, t, h + 2, d)
            q, k, vv = g[..., :-2, :].transpose(1, 2), g[..., [-2], :].transpose(1, 2), g[..., [-1], :].transpose(1, 2)
            k, vv = k.expand(b, h, t, d), vv.expand(b, h, t, d)
        q, k = apply_rope(q, torch.arange(t), rope, None), apply_rope(k, torch.arange(t), rope, None)
        o, w = softmax_attention(q, k, vv, mask)
        attns.append(w)
        attn_out = merge_heads(o) @ L["dense"][0].T + L["dense"][1]
        m = layer_norm(x, *L["ln_mlp"], eps) if new_arch else a
        mlp = gelu(m @ L["up"][0].T + L["up"][1]) @ L["down"][0].T + L["down"][1]
        x = x + attn_out + mlp
    hidden = layer_norm(x, *lnf, eps)
    write_model(name, cfg, p.stored, False, ids, None, hidden @ emb.T, hidden, attns, tokenizer=tok)


def phi(name, dtype):
    cfg, p, W, tok = phi_weights(name, dtype)
    ids = torch.from_numpy(p.rng.integers(0, cfg["vocab_size"], size=(2, 9)))
    logits, hidden, attns = phi_forward(cfg, W, ids)
    write_model(name, cfg, p.stored, False, ids, None, logits, hidden, attns, tokenizer=tok)


# ---------------------------------------------------------------- BERT


def bert_weights(name, dtype, old_names, roberta=False):
    """Draws the BERT folder name's weights: (cfg, Params, weights W). With roberta, RoBERTa's:
    the names under roberta. and lm_head., one token type, positions after the padding token's."""
    cfg = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 40, "hidden_size": 16,
           "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 24, "hidden_act": "gelu",
           "max_position_embeddings": 16, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0,
           "position_embedding_type": "absolute", "torch_dtype": torch_dtype(dtype)}
    if roberta:
        cfg.update(architectures=["RobertaForMaskedLM"], model_type="roberta", vocab_size=roberta_tokenizer()[1],
                   max_position_embeddings=18, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                   layer_norm_eps=1e-5)
    base, head = ("roberta.", "lm_head.") if roberta else ("bert.", "cls.predictions.")
    p = Params(name, dtype)
    e, v, h = cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"]
    ffn, eps = cfg["intermediate_size"], cfg["layer_norm_eps"]
    g, bb = ("gamma", "beta") if old_names else ("weight", "bias")

    def ln(prefix):
        return p.layer_norm(prefix, e, g, bb)

    lin = p.linear

    word = p.draw(base + "embeddings.word_embeddings.weight", (v, e), 0.5)
    pos = p.draw(base + "embeddings.position_embeddings.weight", (cfg["max_position_embeddings"], e), 0.3)
    typ = p.draw(base + "embeddings.token_type_embeddings.weight", (cfg["type_vocab_size"], e), 0.3)
    emb_ln = ln(base + "embeddings.LayerNorm")
    layers = []
    for l in range(cfg["num_hidden_layers"]):
        s = f"{base}encoder.layer.{l}."
        layers.append({
            "q": lin(s + "attention.self.query", e, e), "k": lin(s + "attention.self.key", e, e),
            "v": lin(s + "attention.self.value", e, e), "o": lin(s + "attention.output.dense", e, e),
            "ln1": ln(s + "attention.output.LayerNorm"), "i": lin(s + "intermediate.dense", e, ffn),
            "out": lin(s + "output.dense", ffn, e), "ln2": ln(s + "output.LayerNorm"),
        })
    head_dense = lin(head + ("dense" if roberta else "transform.dense"), e, e)
    head_ln = ln(head + ("layer_norm" if roberta else "transform.LayerNorm"))
    head_bias = p.draw(head + "bias", (v,), 0.1)
    # The decoder is tied to the word embeddings; the masked-LM state dicts store both names.
    p.stored[head + "decoder.weight"] = p.stored[base + "embeddings.word_embeddings.weight"]
    p.stored[head + "decoder.bias"] = p.stored[head + "bias"]
    return cfg, p, {"word": word, "pos": pos, "typ": typ, "emb_ln": emb_ln, "layers": layers,
                    "head_dense": head_dense, "head_ln": head_ln, "head_bias": head_bias}


def bert_forward(cfg, W, ids, am, types, trace=None, hook=None):
    """BertForMaskedLM's forward of ids [B, T] with attention mask am and token types: (logits,
    hidden, attentions). When trace is a dict, it also records the stream entering every block
    (resid_pre) and the last block's output (resid_final)."""
    h, eps = cfg["num_attention_heads"], cfg["layer_norm_eps"]
    b, t = ids.shape
    positions = torch.arange(t)
    if cfg["model_type"] == "roberta":  # create_position_ids_from_input_ids: after the padding token's
        real = ids.ne(cfg["pad_token_id"]).long()
        positions = torch.cumsum(real, dim=1) * real + cfg["pad_token_id"]
    x = layer_norm(W["word"][ids] + W["pos"][positions] + W["typ"][types], *W["emb_ln"], eps)
    mask = am.bool().view(b, 1, 1, t).expand(b, 1, t, t)
    attns = []
    for l, L in enumerate(W["layers"]):
        x = run_hook(hook, "resid_pre", l, x)
        record(trace, "resid_pre", x)

        def f(name, y):
            return y @ L[name][0].T + L[name][1]
        o, w = softmax_attention(split_heads(f("q", x), h), split_heads(f("k", x), h), split_heads(f("v", x), h), mask,
                                 hook, l)
        attns.append(w)
        x = layer_norm(f("o", merge_heads(o)) + x, *L["ln1"], eps)  # post-norm: LN(X + MultiHead(X))
        x = layer_norm(f("out", gelu(f("i", x))) + x, *L["ln2"], eps)
    x = run_hook(hook, "resid_final", len(W["layers"]), x)
    if trace is not None:
        trace["resid_final"] = x
    hidden = x
    return bert_head(cfg, W, hidden), hidden, attns


def bert_head(cfg, W, x):
    """BertForMaskedLM's cls.predictions: the transform (dense, GELU, LayerNorm) and the decoder."""
    hd, eps = W["head_dense"], cfg["layer_norm_eps"]
    y = layer_norm(gelu(x @ hd[0].T + hd[1]), *W["head_ln"], eps)
    return y @ W["word"].T + W["head_bias"]


def bert(name, dtype, old_names):
    cfg, p, W = bert_weights(name, dtype, old_names)
    v = cfg["vocab_size"]
    ids = torch.from_numpy(p.rng.integers(1, v, size=(2, 8)))
    am = torch.ones(2, 8, dtype=torch.int64)
    am[1, 5:] = 0
    ids[1, 5:] = cfg["pad_token_id"]
    types = torch.zeros(2, 8, dtype=torch.int64)
    types[0, 4:] = 1
    logits, hidden, attns = bert_forward(cfg, W, ids, am, types)
    write_model(name, cfg, p.stored, False, ids, am, logits, hidden, attns, token_type_ids=types,
                tokenizer=bert_tokenizer()[0])


def distilbert(name, dtype):
    """A DistilBertForMaskedLM folder: BERT's blocks under DistilBERT's names and config keys,
    without token types, run by bert_forward (its token type embedding a zero row)."""
    cfg = {"architectures": ["DistilBertForMaskedLM"], "model_type": "distilbert", "vocab_size": 40, "dim": 16,
           "n_layers": 2, "n_heads": 4, "hidden_dim": 24, "activation": "gelu", "max_position_embeddings": 16,
           "sinusoidal_pos_embds": False, "pad_token_id": 0, "torch_dtype": torch_dtype(dtype)}
    p = Params(name, dtype)
    e, v, ffn = cfg["dim"], cfg["vocab_size"], cfg["hidden_dim"]

    def ln(prefix):
        return p.layer_norm(prefix, e)

    lin = p.linear
    word = p.draw("distilbert.embeddings.word_embeddings.weight", (v, e), 0.5)
    pos = p.draw("distilbert.embeddings.position_embeddings.weight", (cfg["max_position_embeddings"], e), 0.3)
    emb_ln = ln("distilbert.embeddings.LayerNorm")
    layers = []
    for l in range(cfg["n_layers"]):
        s = f"distilbert.transformer.layer.{l}."
        layers.append({"q": lin(s + "attention.q_lin", e, e), "k": lin(s + "attention.k_lin", e, e),
                       "v": lin(s + "attention.v_lin", e, e), "o": lin(s + "attention.out_lin", e, e),
                       "ln1": ln(s + "sa_layer_norm"), "i": lin(s + "ffn.lin1", e, ffn), "out": lin(s + "ffn.lin2", ffn, e),
                       "ln2": ln(s + "output_layer_norm")})
    head_dense = lin("vocab_transform", e, e)
    head_ln = ln("vocab_layer_norm")
    head_bias = p.draw("vocab_projector.bias", (v,), 0.1)
    p.stored["vocab_projector.weight"] = p.stored["distilbert.embeddings.word_embeddings.weight"]  # tied, stored
    W = {"word": word, "pos": pos, "typ": torch.zeros(1, e), "emb_ln": emb_ln, "layers": layers,
         "head_dense": head_dense, "head_ln": head_ln, "head_bias": head_bias}
    run_cfg = {"num_attention_heads": cfg["n_heads"], "layer_norm_eps": 1e-12, "model_type": "distilbert"}
    ids = torch.from_numpy(p.rng.integers(1, v, size=(2, 8)))
    am = torch.ones(2, 8, dtype=torch.int64)
    am[1, 6:] = 0
    ids[1, 6:] = cfg["pad_token_id"]
    logits, hidden, attns = bert_forward(run_cfg, W, ids, am, torch.zeros(2, 8, dtype=torch.int64))
    write_model(name, cfg, p.stored, False, ids, am, logits, hidden, attns, tokenizer=bert_tokenizer()[0])


def roberta(name, dtype):
    """A RobertaForMaskedLM folder; its sequences have no padding, whose own positions RoBERTa
    numbers apart (mha numbers every position in turn)."""
    cfg, p, W = bert_weights(name, dtype, False, roberta=True)
    ids = torch.from_numpy(p.rng.integers(3, cfg["vocab_size"], size=(2, 8)))
    ids[:, 0] = 0
    types = torch.zeros(2, 8, dtype=torch.int64)
    logits, hidden, attns = bert_forward(cfg, W, ids, torch.ones(2, 8, dtype=torch.int64), types)
    write_model(name, cfg, p.stored, False, ids, None, logits, hidden, attns, tokenizer=roberta_tokenizer()[0])


# ---------------------------------------------------------------- Llama family


def llama_weights(name, dtype, arch, kv_heads, tied, qkv_bias=False, window=None, scaling=None, head_dim=None, longrope=False):
    """Draws the Llama-family folder name's weights: (cfg, Params, weights W, tokenizer). With
    longrope (Phi-3): two heads of 8, three quarters of each rotated, LongRoPE's factors for
    an original length of 8 in 64 positions."""
    model_type = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
                  "MistralForCausalLM": "mistral", "GemmaForCausalLM": "gemma", "Phi3ForCausalLM": "phi3",
                  "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text",
                  "SmolLM3ForCausalLM": "smollm3", "MixtralForCausalLM": "mixtral",
                  "Qwen3MoeForCausalLM": "qwen3_moe", "Qwen2MoeForCausalLM": "qwen2_moe",
                  "Olmo2ForCausalLM": "olmo2", "Olmo3ForCausalLM": "olmo3", "OlmoeForCausalLM": "olmoe"}[arch]
    tok, vocab_size = llama_tokenizer()
    cfg = {"architectures": [arch], "model_type": model_type, "vocab_size": vocab_size + 3, "hidden_size": 16,
           "intermediate_size": 28, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": kv_heads,
           "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 500.0, "hidden_act": "silu",
           "tie_word_embeddings": tied, "attention_bias": qkv_bias if model_type == "llama" else False,
           "torch_dtype": torch_dtype(dtype), "bos_token_id": 1, "eos_token_id": 2}
    if scaling is not None:
        cfg["rope_scaling"] = dict(scaling, rope_type=scaling.get("rope_type", "llama3"))
    if window is not None:
        cfg["sliding_window"] = window
    if longrope:
        cfg["num_attention_heads"] = 2
    p = Params(name, dtype)
    e, v, h, ffn = cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"], cfg["intermediate_size"]
    d = head_dim or e // h
    if model_type in ("qwen3", "qwen3_moe"):  # Qwen3's config names its head size; and no sliding window
        cfg.update(head_dim=d, use_sliding_window=False, sliding_window=None, max_window_layers=2)
    experts = 0
    if model_type == "mixtral":  # 4 experts of intermediate_size, 2 a token, their weights renormalised
        experts = 4
        cfg.update(num_local_experts=experts, num_experts_per_tok=2, sliding_window=None)
    if model_type == "qwen2_moe":  # Qwen3-MoE's, plus a gated shared expert of its own width; q/k/v biases
        cfg.update(qkv_bias=qkv_bias, shared_expert_intermediate_size=20)
        del cfg["attention_bias"]
    if model_type == "olmo3":  # four layers: sliding, sliding, sliding, full (layer_types left out)
        cfg.update(num_hidden_layers=4, sliding_window=4)
    if model_type == "olmoe":  # 4 experts of intermediate_size, 2 a token, the softmax's weights
        experts = 4
        cfg.update(num_experts=experts, num_experts_per_tok=2, norm_topk_prob=False)
    if model_type in ("qwen3_moe", "qwen2_moe"):  # 4 experts of moe_intermediate_size, 2 a token, the softmax's weights
        experts = 4
        cfg.update(num_experts=experts, num_experts_per_tok=2, moe_intermediate_size=12, norm_topk_prob=False,
                   decoder_sparse_step=1, mlp_only_layers=[])
    elif head_dim is not None:
        cfg["head_dim"] = d
    gemma2, gemma3 = model_type == "gemma2", model_type == "gemma3_text"
    gemma = model_type == "gemma" or gemma2 or gemma3
    if gemma:  # modeling_gemma.py's MLP reads hidden_activation and ignores hidden_act
        cfg.update(hidden_act="gelu", hidden_activation="gelu_pytorch_tanh")
    if gemma2:  # three layers: sliding, full, sliding; soft-caps that bite on this model's scores and logits
        del cfg["hidden_act"]
        cfg.update(num_hidden_layers=3, sliding_window=4, query_pre_attn_scalar=6, attn_logit_softcapping=1.0,
                   final_logit_softcapping=3.0)
    if gemma3:  # three layers: sliding, full, sliding; the full one's rotary linearly scaled
        del cfg["hidden_act"]
        cfg.update(num_hidden_layers=3, sliding_window=4, sliding_window_pattern=2, rope_local_base_freq=10.0,
                   rope_scaling={"rope_type": "linear", "factor": 4.0}, query_pre_attn_scalar=6,
                   final_logit_softcapping=None, attn_logit_softcapping=None)
    if model_type == "smollm3":  # three layers, the middle one NoPE and (its default layer type) sliding
        cfg.update(num_hidden_layers=3, no_rope_layers=[1, 0, 1], use_sliding_window=True, sliding_window=4)
    phi3 = model_type == "phi3"
    if phi3:  # Phi3RotaryEmbedding rotates the first int(head_dim · partial_rotary_factor) features
        cfg.update(partial_rotary_factor=0.5)
        del cfg["attention_bias"]
    if longrope:  # as Phi-3.5-mini's and Phi-4-mini's rope_scaling, at this model's size
        cfg.update(partial_rotary_factor=0.75, original_max_position_embeddings=8,
                   rope_scaling={"type": "longrope", "short_factor": [1.0, 1.6, 3.5], "long_factor": [1.2, 4.0, 11.0]})
    emb = p.draw("model.embed_tokens.weight", (v, e), 0.5)
    layers = []
    # Gemma's RMSNorm multiplies by 1 + weight, its weights near 0: the reference uses 1 + w.
    norm_mean, gain = (0.0, lambda w: 1 + w) if gemma else (1.0, lambda w: w)
    for l in range(cfg["num_hidden_layers"]):
        s = f"model.layers.{l}."
        if model_type in ("olmo2", "olmo3"):  # only the attention's and the MLP's outputs normalised
            L = {"attn_out_norm": p.draw(s + "post_attention_layernorm.weight", (e,), 0.1, norm_mean),
                 "mlp_out_norm": p.draw(s + "post_feedforward_layernorm.weight", (e,), 0.1, norm_mean)}
        else:
            L = {"in_norm": gain(p.draw(s + "input_layernorm.weight", (e,), 0.1, norm_mean)),
                 "post_norm": gain(p.draw(s + "post_attention_layernorm.weight", (e,), 0.1, norm_mean))}
        if gemma2 or gemma3:  # post_attention_layernorm normalises the attention's output; the MLP has two
            L.update(attn_out_norm=L.pop("post_norm"),
                     post_norm=gain(p.draw(s + "pre_feedforward_layernorm.weight", (e,), 0.1, norm_mean)),
                     mlp_out_norm=gain(p.draw(s + "post_feedforward_layernorm.weight", (e,), 0.1, norm_mean)))
        if phi3:  # Phi3Attention's qkv_proj [q; k; v] and Phi3MLP's gate_up_proj [gate; up], split
            qkv = p.draw(s + "self_attn.qkv_proj.weight", (h * d + 2 * kv_heads * d, e))
            L.update(q=qkv[:h * d], k=qkv[h * d:h * d + kv_heads * d], v=qkv[h * d + kv_heads * d:],
                     o=p.draw(s + "self_attn.o_proj.weight", (e, h * d)))
            gate_up = p.draw(s + "mlp.gate_up_proj.weight", (2 * ffn, e))
            L.update(gate=gate_up[:ffn], up=gate_up[ffn:], down=p.draw(s + "mlp.down_proj.weight", (e, ffn)))
        elif experts:  # the router (std 1, so that no token's choice is near a tie) and each expert's SwiGLU
            L.update(q=p.draw(s + "self_attn.q_proj.weight", (h * d, e)),
                     k=p.draw(s + "self_attn.k_proj.weight", (kv_heads * d, e)),
                     v=p.draw(s + "self_attn.v_proj.weight", (kv_heads * d, e)),
                     o=p.draw(s + "self_attn.o_proj.weight", (e, h * d)))
            moe, names = ("block_sparse_moe.", ("w1", "w3", "w2")) if model_type == "mixtral" else \
                ("mlp.", ("gate_proj", "up_proj", "down_proj"))
            width = cfg.get("moe_intermediate_size", ffn)
            L["router"] = p.draw(s + moe + "gate.weight", (experts, e), 1.0)
            L["experts"] = [{"gate": p.draw(s + f"{moe}experts.{x}.{names[0]}.weight", (width, e)),
                             "up": p.draw(s + f"{moe}experts.{x}.{names[1]}.weight", (width, e)),
                             "down": p.draw(s + f"{moe}experts.{x}.{names[2]}.weight", (e, width))}
                            for x in range(experts)]
            if "shared_expert_intermediate_size" in cfg:
                sw = cfg["shared_expert_intermediate_size"]
                L["shared"] = {"gate": p.draw(s + "mlp.shared_expert.gate_proj.weight", (sw, e)),
                               "up": p.draw(s + "mlp.shared_expert.up_proj.weight", (sw, e)),
                               "down": p.draw(s + "mlp.shared_expert.down_proj.weight", (e, sw))}
                L["shared_gate"] = p.draw(s + "mlp.shared_expert_gate.weight", (1, e), 1.0)
        else:
            L.update(q=p.draw(s + "self_attn.q_proj.weight", (h * d, e)),
                     k=p.draw(s + "self_attn.k_proj.weight", (kv_heads * d, e)),
                     v=p.draw(s + "self_attn.v_proj.weight", (kv_heads * d, e)),
                     o=p.draw(s + "self_attn.o_proj.weight", (e, h * d)),
                     gate=p.draw(s + "mlp.gate_proj.weight", (ffn, e)),
                     up=p.draw(s + "mlp.up_proj.weight", (ffn, e)),
                     down=p.draw(s + "mlp.down_proj.weight", (e, ffn)))
        if qkv_bias:
            for part, n in (("q", h * d), ("k", kv_heads * d), ("v", kv_heads * d)):
                L[part + "b"] = p.draw(s + f"self_attn.{part}_proj.bias", (n,), 0.1)
        if model_type in ("qwen3", "qwen3_moe"):  # Qwen3RMSNorm over each head's d values of q and k
            L["q_norm"] = p.draw(s + "self_attn.q_norm.weight", (d,), 0.3, 1.0)
            L["k_norm"] = p.draw(s + "self_attn.k_norm.weight", (d,), 0.3, 1.0)
        if model_type in ("olmo2", "olmo3", "olmoe"):  # an RMSNorm over the whole projections of q and of k
            L["q_norm_all"] = p.draw(s + "self_attn.q_norm.weight", (h * d,), 0.3, 1.0)
            L["k_norm_all"] = p.draw(s + "self_attn.k_norm.weight", (kv_heads * d,), 0.3, 1.0)
        if gemma3:  # Gemma3RMSNorm: 1 + weight
            L["q_norm"] = gain(p.draw(s + "self_attn.q_norm.weight", (d,), 0.3))
            L["k_norm"] = gain(p.draw(s + "self_attn.k_norm.weight", (d,), 0.3))
        layers.append(L)
    norm = gain(p.draw("model.norm.weight", (e,), 0.1, norm_mean))
    head = emb if tied else p.draw("lm_head.weight", (v, e), 0.5)
    return cfg, p, {"emb": emb, "layers": layers, "norm": norm, "head": head, "qkv_bias": qkv_bias}, tok


def llama_rms(cfg, x, w):
    """Llama's RMSNorm."""
    return w * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + cfg["rms_norm_eps"]))


def llama_forward(cfg, W, ids, trace=None, hook=None):
    """LlamaForCausalLM's forward of ids [B, T] (Qwen2's, Qwen3's and Mistral's alike): (logits, hidden,
    attentions). When trace is a dict, it also records per block the stream entering it
    (resid_pre), the heads' outputs before o_proj (z [B, T, E]), the attention's output after
    o_proj (attn_out; Gemma 3 then normalises it), the stream after the attention (resid_mid) and
    what the MLP adds to it (mlp_out), and the last block's output (resid_final)."""
    e, h, kv_heads = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim", e // h)  # LlamaAttention's head_dim: hidden_size // heads unless given
    qkv_bias, window, scaling = W["qkv_bias"], cfg.get("sliding_window"), cfg.get("rope_scaling")
    emb, layers = W["emb"], W["layers"]

    def rms(x, w):
        return llama_rms(cfg, x, w)

    b, t = ids.shape
    rope = (cfg["rope_theta"], int(d * cfg.get("partial_rotary_factor", 1.0)), "half", 0)
    if scaling is None:
        sc = None
    elif scaling.get("type") == "longrope":  # Phi-3's: the attention factor from the two lengths
        orig = cfg["original_max_position_embeddings"]
        af = math.sqrt(1 + math.log(cfg["max_position_embeddings"] / orig) / math.log(orig))
        sc = ("longrope", scaling["short_factor"], scaling["long_factor"], orig, af)
    elif scaling["rope_type"] == "linear":
        sc = ("linear", scaling["factor"])
    elif scaling["rope_type"] == "yarn":  # _compute_yarn_parameters' defaults for what the object leaves out
        sc = ("yarn", scaling["factor"], scaling.get("original_max_position_embeddings") or cfg["max_position_embeddings"],
              scaling.get("beta_fast", 0), scaling.get("beta_slow", 0), scaling.get("truncate", True),
              scaling.get("attention_factor", 0))
    else:
        sc = (scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"],
              scaling["original_max_position_embeddings"])
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    gemma2, gemma3 = cfg["model_type"] == "gemma2", cfg["model_type"] == "gemma3_text"
    visible = j <= i
    olmo3 = cfg["model_type"] == "olmo3"
    if window is not None and not (gemma2 or gemma3 or olmo3 or cfg["model_type"] == "smollm3"):  # Mistral's and Phi-3's every layer
        visible = visible & (j > i - window)
    mask = visible.view(1, 1, t, t)
    scale, softcap = None, cfg.get("attn_logit_softcapping")
    if gemma2 or gemma3:  # layer l is sliding unless (l + 1) % pattern == 0 (2 in Gemma 2, sliding_window_pattern in Gemma 3)
        local_rope = (cfg["rope_local_base_freq"], d, "half", 0) if gemma3 else rope  # Gemma 2: one rotary
        local_mask = (visible & (j > i - window)).view(1, 1, t, t)
        pattern = cfg["sliding_window_pattern"] if gemma3 else 2
        scale = cfg["query_pre_attn_scalar"] ** -0.5
    x = emb[ids]
    gemma = cfg["model_type"] in ("gemma", "gemma2", "gemma3_text")
    if gemma:  # GemmaModel's normalizer: hidden_size**0.5 in the hidden states' dtype, float32
        x = x * float(np.float32(math.sqrt(e)))
    attns = []
    for l, L in enumerate(layers):
        x = run_hook(hook, "resid_pre", l, x)
        record(trace, "resid_pre", x)
        a = rms(x, L["in_norm"]) if "in_norm" in L else x  # OLMo 2's attention reads the stream
        q, k, vv = a @ L["q"].T, a @ L["k"].T, a @ L["v"].T
        if qkv_bias:
            q, k, vv = q + L["qb"], k + L["kb"], vv + L["vb"]
        if "q_norm_all" in L:  # OLMo 2, OLMoE: q_norm and k_norm before the heads are split
            q, k = rms(q, L["q_norm_all"]), rms(k, L["k_norm_all"])
        q, k, vv = split_heads(q, h), split_heads(k, kv_heads), split_heads(vv, kv_heads)
        if "q_norm" in L:  # Qwen3, Gemma 3: q_norm and k_norm before the rotation
            q, k = rms(q, L["q_norm"]), rms(k, L["k_norm"])
        r, s, lmask = rope, sc, mask
        if (gemma2 or gemma3) and (l + 1) % pattern != 0:
            r, s, lmask = local_rope, None if gemma3 else sc, local_mask
        if olmo3 and (l + 1) % 4 != 0:  # OLMo 3's sliding layers: the window, and the rotary unscaled
            s, lmask = None, (visible & (j > i - window)).view(1, 1, t, t)
        if cfg.get("no_rope_layers", [1] * len(layers))[l]:  # SmolLM3Attention's use_rope
            q, k = apply_rope(q, torch.arange(t), r, s), apply_rope(k, torch.arange(t), r, s)
        elif cfg.get("use_sliding_window") and cfg.get("sliding_window"):  # SmolLM3: its NoPE layers slide
            lmask = (visible & (j > i - cfg["sliding_window"])).view(1, 1, t, t)
        rep = h // kv_heads  # repeat_kv: query head i reads K/V head i // rep
        k, vv = k.repeat_interleave(rep, dim=1), vv.repeat_interleave(rep, dim=1)
        o, w = softmax_attention(q, k, vv, lmask, hook, l, scale, softcap)
        attns.append(w)
        record(trace, "z", merge_heads(o))
        y = merge_heads(o) @ L["o"].T
        record(trace, "attn_out", y)
        if "attn_out_norm" in L:  # Gemma 2 and 3
            y = rms(y, L["attn_out_norm"])
        x = x + y
        record(trace, "resid_mid", x)
        m = rms(x, L["post_norm"]) if "post_norm" in L else x
        if "router" in L:
            f = moe(cfg, L, m)
        else:
            gate = m @ L["gate"].T
            act = gelu_new(gate) if gemma else gate * torch.sigmoid(gate)  # Gemma's GeGLU, Llama's SwiGLU
            f = (act * (m @ L["up"].T)) @ L["down"].T
        if "mlp_out_norm" in L:
            f = rms(f, L["mlp_out_norm"])
        record(trace, "mlp_out", f)
        x = x + f
    x = run_hook(hook, "resid_final", len(layers), x)
    if trace is not None:
        trace["resid_final"] = x
    hidden = rms(x, W["norm"])
    logits = hidden @ W["head"].T
    if cfg.get("final_logit_softcapping") is not None:  # Gemma2ForCausalLM
        cap = cfg["final_logit_softcapping"]
        logits = cap * torch.tanh(logits / cap)
    return logits, hidden, attns


def moe(cfg, L, x):
    """MixtralSparseMoeBlock's, Qwen2MoeSparseMoeBlock's and Qwen3MoeSparseMoeBlock's forward of x
    [B, T, E]: the router's
    softmax over the experts, each token's num_experts_per_tok most probable, their
    probabilities as weights (renormalised to sum to 1 in Mixtral, and in Qwen3-MoE with
    norm_topk_prob), and the weighted sum of those experts' SwiGLU outputs. Each expert runs here
    on every token and counts only for the tokens routed to it, which is the same sum."""
    p = torch.softmax(x @ L["router"].T, dim=-1)
    w, sel = torch.topk(p, cfg["num_experts_per_tok"], dim=-1)
    if cfg["model_type"] == "mixtral" or cfg.get("norm_topk_prob"):
        w = w / w.sum(-1, keepdim=True)
    def swiglu(E):
        gate = x @ E["gate"].T
        return ((gate * torch.sigmoid(gate)) * (x @ E["up"].T)) @ E["down"].T

    out = torch.zeros_like(x)
    for e, E in enumerate(L["experts"]):
        we = (w * (sel == e)).sum(-1, keepdim=True)  # 0 where the token did not choose expert e
        out = out + we * swiglu(E)
    if "shared" in L:  # Qwen2MoeSparseMoeBlock's shared_expert, scaled by σ(shared_expert_gate(x))
        out = out + torch.sigmoid(x @ L["shared_gate"].T) * swiglu(L["shared"])
    return out


def llama(name, dtype, arch, kv_heads, tied, qkv_bias=False, window=None, scaling=None, shards=False, head_dim=None,
          longrope=False):
    cfg, p, W, tok = llama_weights(name, dtype, arch, kv_heads, tied, qkv_bias, window, scaling, head_dim, longrope)
    ids = torch.from_numpy(p.rng.integers(0, cfg["vocab_size"], size=(2, 10)))
    logits, hidden, attns = llama_forward(cfg, W, ids)
    extra = {}
    if longrope:  # a call that ends within the original length: the short factors
        extra["short.input_ids"] = ids[:, :6].numpy().astype(np.int64)
        extra["short.logits"] = llama_forward(cfg, W, ids[:, :6])[0].numpy()
    write_model(name, cfg, p.stored, shards, ids, None, logits, hidden, attns, tokenizer=tok, extra=extra)


def gemma3_vision(name):
    """The gemma3 folder's text model as Gemma3ForConditionalGeneration stores it (gemma-3-4b-it
    and up): config.json's text_config, leaving out what Gemma3TextConfig defaults to, beside a
    vision_config; the text weights under language_model.model., beside a vision tower and a
    projector (a few tensors of each, which a text model does not read). Same logits as gemma3."""
    cfg, p, W, tok = llama_weights("gemma3", "BF16", "Gemma3ForCausalLM", kv_heads=2, tied=True, window=4, head_dim=8)
    ids = torch.from_numpy(p.rng.integers(0, cfg["vocab_size"], size=(2, 10)))
    logits, hidden, attns = llama_forward(cfg, W, ids)
    defaults = ("architectures", "torch_dtype", "hidden_activation", "rms_norm_eps", "tie_word_embeddings",
                "attn_logit_softcapping", "final_logit_softcapping", "bos_token_id", "eos_token_id")
    text = {k: v for k, v in cfg.items() if k not in defaults}
    outer = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
             "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8, "image_size": 4, "patch_size": 2,
                               "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 12},
             "mm_tokens_per_image": 4, "boi_token_index": 3, "eoi_token_index": 4, "image_token_index": 5,
             "eos_token_id": [1, 2], "torch_dtype": "bfloat16"}
    stored = {"language_model." + k: v for k, v in p.stored.items()}
    v = Params(name, "BF16")
    v.draw("vision_tower.vision_model.embeddings.patch_embedding.weight", (8, 3, 2, 2))
    v.draw("vision_tower.vision_model.post_layernorm.weight", (8,))
    v.draw("multi_modal_projector.mm_input_projection_weight", (8, cfg["hidden_size"]))
    v.draw("multi_modal_projector.mm_soft_emb_norm.weight", (8,))
    stored.update(v.stored)
    write_model(name, outer, stored, False, ids, None, logits, hidden, attns, tokenizer=tok)


# ---------------------------------------------------------------- tokenizers

def bytes_to_unicode():
    """GPT-2's byte-to-unicode table: printable bytes map to themselves, the rest above 255."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


GPT2_MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "a"), ("i", "n"), ("Ġ", "s"), ("e", "r"), ("o", "n")]


def gpt2_tokenizer():
    """A byte-level BPE tokenizer.json in GPT-2's form: the 256 byte symbols, a few merges, and
    <|endoftext|> last."""
    vocab = {c: i for i, c in enumerate(sorted(bytes_to_unicode().values()))}
    for a, b in GPT2_MERGES:
        vocab[a + b] = len(vocab)
    eos = len(vocab)
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": eos, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": True, "special": True}],
            "normalizer": None, "pre_tokenizer": level, "post_processor": dict(level, trim_offsets=False),
            "decoder": level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": [f"{a} {b}" for a, b in GPT2_MERGES]}}, eos + 1


LLAMA_MERGES = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "a"), ("i", "n"), ("e", "r")]


def llama_tokenizer():
    """A SentencePiece-style BPE tokenizer.json in Llama-2's form: <unk>, <s>, </s>, the 256 byte
    fallback tokens, ▁, the lower-case letters and a few merges."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for c in "▁abcdefghijklmnopqrstuvwxyz":
        vocab[c] = len(vocab)
    for a, b in LLAMA_MERGES:
        vocab[a + b] = len(vocab)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                               {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "pre_tokenizer": None,
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                               "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                        {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                               "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
            "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                         {"type": "ByteFallback"}, {"type": "Fuse"},
                                                         {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                      "vocab": vocab, "merges": [f"{a} {b}" for a, b in LLAMA_MERGES]}}, len(vocab)


def roberta_tokenizer():
    """A byte-level BPE tokenizer.json in roberta-base's form: <s>, <pad>, </s>, <unk>, the 256 byte
    symbols, a few merges and <mask>, with RobertaProcessing's <s> … </s>."""
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for c in sorted(bytes_to_unicode().values()):
        vocab[c] = len(vocab)
    for a, b in GPT2_MERGES:
        vocab[a + b] = len(vocab)
    vocab["<mask>"] = len(vocab)
    added = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": t == "<mask>", "rstrip": False,
              "normalized": False, "special": True} for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")]
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": level, "decoder": level,
            "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": True,
                               "add_prefix_space": False},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": [f"{a} {b}" for a, b in GPT2_MERGES]}}, len(vocab)


def bert_tokenizer():
    """A WordPiece tokenizer.json in bert-base-uncased's form."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "sat", "on", "mat", ".", ",", "##s",
             "dog", "is", "play", "##ing", "[", "]"]
    words += [c for c in "bcdefghijklmnopqrstuvwxyz" if c not in words][:40 - len(words)]
    vocab = {w: i for i, w in enumerate(words)}
    added = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")]
    cls, sep = {"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                           "strip_accents": None, "lowercase": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [cls, {"Sequence": {"id": "A", "type_id": 0}}, sep],
                               "pair": [cls, {"Sequence": {"id": "A", "type_id": 0}}, sep,
                                        {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                               "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                                  "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": 100, "vocab": vocab}}, len(vocab)


# ---------------------------------------------------------------- files


def torch_dtype(dtype):
    return {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]


def write_model(name, cfg, stored, shards, ids, attention_mask, logits, hidden, attns, token_type_ids=None,
                tokenizer=None, extra=None):
    d = os.path.join(OUT_DIR, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    if tokenizer is not None:
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(tokenizer, f, ensure_ascii=False, indent=1)
            f.write("\n")
    meta = {"format": "pt"}
    if shards:
        names = sorted(stored)
        half = len(names) // 2
        weight_map = {}
        for k, part in enumerate((names[:half], names[half:])):
            fname = f"model-{k + 1:05d}-of-00002.safetensors"
            write_safetensors(os.path.join(d, fname), {n: stored[n] for n in part}, meta)
            weight_map.update({n: fname for n in part})
        total = sum(int(np.prod(stored[n].shape)) for n in names)
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
            f.write("\n")
    else:
        write_safetensors(os.path.join(d, "model.safetensors"), stored, meta)
    exp = {"input_ids": ids.numpy().astype(np.int64), "logits": logits.numpy(), "hidden": hidden.numpy()}
    if attention_mask is not None:
        exp["attention_mask"] = attention_mask.numpy().astype(np.int64)
    if token_type_ids is not None:
        exp["token_type_ids"] = token_type_ids.numpy().astype(np.int64)
    for l, w in enumerate(attns):
        exp[f"attentions.{l}"] = w.numpy()
    exp.update(extra or {})
    write_safetensors(os.path.join(d, "expected.safetensors"), exp, {"model": name})


def main():
    torch.set_default_dtype(torch.float64)
    gpt2("gpt2", "F32", prefix=False, buffers=True, tied_stored=False, shards=False)
    gpt2("gpt2-prefixed-f16-sharded", "F16", prefix=True, buffers=False, tied_stored=True, shards=True)
    bert("bert", "F32", old_names=False)
    bert("bert-gamma-beta", "F32", old_names=True)
    llama("llama", "F32", "LlamaForCausalLM", kv_heads=2, tied=False)
    llama("llama3-bf16", "BF16", "LlamaForCausalLM", kv_heads=1, tied=True, shards=True,
          scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8})
    llama("qwen2", "F32", "Qwen2ForCausalLM", kv_heads=2, tied=True, qkv_bias=True)
    llama("mistral", "F32", "MistralForCausalLM", kv_heads=2, tied=False, window=4)
    llama("qwen3-bf16", "BF16", "Qwen3ForCausalLM", kv_heads=2, tied=True)
    llama("qwen3-wide", "F32", "Qwen3ForCausalLM", kv_heads=2, tied=False, head_dim=8)  # heads of 8 in 16: Qwen3-0.6B's shape
    llama("gemma", "F32", "GemmaForCausalLM", kv_heads=1, tied=True, head_dim=8)  # one K/V head, as gemma-2b
    llama("phi3", "BF16", "Phi3ForCausalLM", kv_heads=2, tied=False, window=4)  # fused qkv and gate_up, half the head rotated
    neox("pythia", "F16", parallel=True, rotary_pct=0.25, buffers=False)  # Pythia's layout: two of each head's 8 rotated
    neox("gpt-neox-sequential", "F32", parallel=False, rotary_pct=1.0, buffers=True)
    phi("phi2", "F16")  # one LayerNorm for the parallel attention and MLP, a biased head
    stablelm("stablelm2", "BF16")  # LayerNorm with SwiGLU, q/k/v biases, grouped K/V heads
    gptj("gptj", "F16")  # GPT-J-6B's layout: parallel from one ln_1, interleaved rotary on half of each head
    starcoder2("starcoder2", "F32")  # LayerNorm, biases everywhere, a window over every layer, a tied head
    falcon("falcon", "BF16", new_arch=False)  # Falcon-7B's multi-query, parallel block from one norm
    gpt_bigcode("gpt-bigcode", "F16")  # StarCoder's: GPT-2's blocks with multi-query attention
    falcon("falcon-new-arch", "F32", new_arch=True)  # Falcon-40B's: two K/V groups, ln_attn and ln_mlp, biases
    roberta("roberta", "F32")
    distilbert("distilbert", "F32")
    llama("phi3-longrope", "F32", "Phi3ForCausalLM", kv_heads=1, tied=False, longrope=True)  # 10 positions past the original 8
    llama("gemma2", "F32", "Gemma2ForCausalLM", kv_heads=2, tied=True, window=4, head_dim=8)  # sliding, full, sliding; soft-caps
    llama("gemma3", "BF16", "Gemma3ForCausalLM", kv_heads=2, tied=True, window=4, head_dim=8)  # local, global, local
    gemma3_vision("gemma3-vision")
    # Qwen3 with YaRN as its long-context configs set it (a factor of 4 over an original length,
    # beta_fast and beta_slow left to their defaults); with θ = 500 the ramp runs from pair 1 to
    # pair 5, so it is 0, 0, 1/4, 1/2 over these heads' 4 pairs.
    llama("smollm3", "F32", "SmolLM3ForCausalLM", kv_heads=1, tied=True)  # rotary, NoPE and sliding, rotary
    llama("mixtral", "F32", "MixtralForCausalLM", kv_heads=2, tied=False)  # 4 experts, 2 a token
    llama("qwen3-moe-bf16", "BF16", "Qwen3MoeForCausalLM", kv_heads=2, tied=False, head_dim=8)  # Qwen3's attention, 4 experts
    llama("qwen2-moe", "F32", "Qwen2MoeForCausalLM", kv_heads=2, tied=False, qkv_bias=True)  # 4 experts and a gated shared one
    llama("olmo2", "F32", "Olmo2ForCausalLM", kv_heads=2, tied=False)  # outputs normalised, qk-norm across the heads
    llama("olmoe-bf16", "BF16", "OlmoeForCausalLM", kv_heads=4, tied=False)  # qk-norm across the heads, 4 experts
    llama("olmo3", "F32", "Olmo3ForCausalLM", kv_heads=2, tied=False,
          scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})  # YaRN on the full layer only
    llama("qwen3-yarn", "F32", "Qwen3ForCausalLM", kv_heads=2, tied=True, head_dim=8,
          scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})


if __name__ == "__main__":
    main()
