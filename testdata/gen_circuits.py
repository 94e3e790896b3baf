#!/usr/bin/env python3
"""Reference composition scores, token circuits and head subspaces for package circuits.

Run from the repository root with the interpreter that has PyTorch 1.13:

    /usr/bin/python3 testdata/gen_circuits.py

For the committed tiny Hugging Face checkpoints testdata/pretrained/{gpt2,llama,qwen3-wide,gemma,gemma2,gemma3,pythia,phi2,bert} this reads
the weights under their Hugging Face names (GPT-2's Conv1D c_attn/c_proj, Llama's q/k/v/o_proj
with grouped K/V heads, GPT-NeoX's query_key_value per head, BERT's query/key/value/output.dense), independently of mha's loader, and
computes in float64 with PyTorch, forming every d_model × d_model circuit explicitly (the Go code
goes through the d_head factors instead):

  - the Q-, K- and V-composition scores of TransformerLens's all_composition_scores,
    ‖W_A·W_B‖_F / (‖W_A‖_F‖W_B‖_F), W_A = W_V·W_O of the earlier head, W_B = W_Q·W_Kᵀ, its
    transpose, or W_V·W_O of the later head; folded (fold_ln + center_writing_weights: each
    reader gets the γ of the normalisation that produces its input, LayerNorm models centre
    readers and writers, and Gemma 2's and 3's writers get the γ′ of the post_attention_layernorm that
    normalises their output) and raw;
  - the top TOP entries of each head's OV circuit W_E·W_V·W_O·W_U (rows centred) and QK circuit
    W_E·W_Q·W_Kᵀ·W_Eᵀ, folded;
  - per layer, the head × head overlap (mean cos² of the principal angles) and smallest angle of
    the raw column spaces of W_Q, W_K, W_V and row spaces of W_O.

It writes testdata/circuits/composition_<name>.safetensors (F64 tensors, I64 indices):
  comp_{q,k,v} and raw_{q,k,v} [L, H, L, H] (0 where l1 ≥ l2),
  ov_rows, ov_cols (I64) and ov_vals [L, H, TOP], likewise qk_*,
  overlap_{q,k,v,o} and angle_{q,k,v,o} [L, n, n] (n = heads, or K/V heads for k and v; angles in
  degrees).
"""

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import read_safetensors, write_safetensors  # noqa: E402  the project's one safetensors reader and writer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "circuits")
TOP = 5

torch.set_num_threads(1)


def load(name):
    folder = os.path.join(HERE, "pretrained", name)
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    tensors, _ = read_safetensors(os.path.join(folder, "model.safetensors"))
    for k, v in tensors.items():
        if v.dtype == np.uint16:  # BF16 bits: the top half of a float32
            tensors[k] = (v.astype(np.uint32) << 16).view(np.float32)
    return cfg, {k: torch.from_numpy(np.array(v, dtype=np.float64)) for k, v in tensors.items()}


class Weights:
    """A model's attention weights in TransformerLens's row-vector convention: per layer, W_Q [H,
    d_model, d], W_K and W_V [Hkv, d_model, d], W_O [H, d, d_model]; the normalisation γ each
    layer reads through (None: none) and the unembedding's; W_E [V, d_model], W_U [d_model, V]."""

    def __init__(self, name):
        cfg, t = load(name)
        self.layers = []
        if name == "gpt2":
            e, h, nl = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
            self.rms, d, hkv = False, e // h, h
            for l in range(nl):
                s = f"h.{l}."
                w = t[s + "attn.c_attn.weight"]  # [e, 3e], x·W
                self.layers.append(dict(q=w[:, :e], k=w[:, e:2 * e], v=w[:, 2 * e:], o=t[s + "attn.c_proj.weight"],
                                        gamma=t[s + "ln_1.weight"]))
            self.gamma_u = t["ln_f.weight"]
            self.W_E = t["wte.weight"]
            self.W_U = t["wte.weight"].T
        elif name in ("llama", "qwen3-wide", "gemma", "gemma2", "gemma3"):  # the last three: heads of head_dim = 8 in a hidden size of 16
            e, h, nl = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
            self.rms, d, hkv = True, cfg.get("head_dim", e // h), cfg["num_key_value_heads"]
            # Gemma's RMSNorm multiplies by 1 + weight, and its stream starts from the token
            # embedding times hidden_size**0.5 (rounded to float32), which W_E carries here.
            gemma = name in ("gemma", "gemma2", "gemma3")
            plus = 1.0 if gemma else 0.0
            for l in range(nl):
                s = f"model.layers.{l}."
                L = dict(q=t[s + "self_attn.q_proj.weight"].T, k=t[s + "self_attn.k_proj.weight"].T,
                         v=t[s + "self_attn.v_proj.weight"].T, o=t[s + "self_attn.o_proj.weight"].T,
                         gamma=plus + t[s + "input_layernorm.weight"])
                if name in ("gemma2", "gemma3"):  # post_attention_layernorm normalises what the heads write
                    L["o_gamma"] = plus + t[s + "post_attention_layernorm.weight"]
                self.layers.append(L)
            self.gamma_u = plus + t["model.norm.weight"]
            self.W_E = t["model.embed_tokens.weight"]
            if gemma:
                self.W_E = self.W_E * float(np.float32(np.sqrt(e)))
            self.W_U = (t["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else t["lm_head.weight"]).T
        elif name == "pythia":  # GPT-NeoX: query_key_value's rows per head [q_h; k_h; v_h]
            e, h, nl = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
            self.rms, d, hkv = False, e // h, h
            for l in range(nl):
                s = f"gpt_neox.layers.{l}."
                w = t[s + "attention.query_key_value.weight"].view(h, 3, d, e)
                self.layers.append(dict(q=w[:, 0].reshape(e, e).T, k=w[:, 1].reshape(e, e).T, v=w[:, 2].reshape(e, e).T,
                                        o=t[s + "attention.dense.weight"].T, gamma=t[s + "input_layernorm.weight"]))
            self.gamma_u = t["gpt_neox.final_layer_norm.weight"]
            self.W_E = t["gpt_neox.embed_in.weight"]
            self.W_U = t["embed_out.weight"].T
        elif name == "phi2":  # q_proj, k_proj, v_proj, dense; both the attention and the MLP read input_layernorm
            e, h, nl = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
            self.rms, d, hkv = False, e // h, h
            for l in range(nl):
                s = f"model.layers.{l}."
                self.layers.append(dict(q=t[s + "self_attn.q_proj.weight"].T, k=t[s + "self_attn.k_proj.weight"].T,
                                        v=t[s + "self_attn.v_proj.weight"].T, o=t[s + "self_attn.dense.weight"].T,
                                        gamma=t[s + "input_layernorm.weight"]))
            self.gamma_u = t["model.final_layernorm.weight"]
            self.W_E = t["model.embed_tokens.weight"]
            self.W_U = t["lm_head.weight"].T
        elif name == "bert":
            e, h, nl = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
            self.rms, d, hkv = False, e // h, h
            for l in range(nl):
                s = f"bert.encoder.layer.{l}."
                # post-norm: layer 0 reads the embeddings' LayerNorm, layer l the output LayerNorm of l-1
                g = t["bert.embeddings.LayerNorm.weight"] if l == 0 else t[f"bert.encoder.layer.{l - 1}.output.LayerNorm.weight"]
                self.layers.append(dict(q=t[s + "attention.self.query.weight"].T, k=t[s + "attention.self.key.weight"].T,
                                        v=t[s + "attention.self.value.weight"].T, o=t[s + "attention.output.dense.weight"].T,
                                        gamma=g))
            # the masked-LM transform's dense layer and GELU are left out; its LayerNorm feeds W_U
            self.gamma_u = t["cls.predictions.transform.LayerNorm.weight"]
            self.W_E = t["bert.embeddings.word_embeddings.weight"]
            self.W_U = self.W_E.T
        else:
            raise ValueError(name)
        self.e, self.h, self.d, self.hkv, self.nl = e, h, d, hkv, nl

    def heads(self, l, fold):
        """W_Q, W_K, W_V [H, d_model, d] (K, V repeated to the query heads), W_O [H, d, d_model]."""
        L, e, d, h = self.layers[l], self.e, self.d, self.h

        def read(w, n):
            w = w.clone()
            if fold:
                w = L["gamma"][:, None] * w
                if not self.rms:
                    w = w - w.mean(0, keepdim=True)
            return w.reshape(e, n, d).permute(1, 0, 2)

        q, k, v = read(L["q"], h), read(L["k"], self.hkv), read(L["v"], self.hkv)
        rep = h // self.hkv
        k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
        o = L["o"].reshape(h, d, e).clone()
        if fold and not self.rms:
            o = o - o.mean(-1, keepdim=True)
        if fold and "o_gamma" in L:  # the writer's own output norm's gain (RMSNorm: no centring)
            o = o * L["o_gamma"]
        return q, k, v, o

    def unembed(self):
        w = self.gamma_u[:, None] * self.W_U
        if not self.rms:
            w = w - w.mean(0, keepdim=True)
        return w


def composition(W, fold):
    nl, h = W.nl, W.h
    out = {m: torch.zeros(nl, h, nl, h, dtype=torch.float64) for m in "qkv"}
    heads = [W.heads(l, fold) for l in range(nl)]
    for l1 in range(nl):
        q1, k1, v1, o1 = heads[l1]
        for l2 in range(l1 + 1, nl):
            q2, k2, v2, o2 = heads[l2]
            for i in range(h):
                A = v1[i] @ o1[i]  # OV of the earlier head, [d_model, d_model]
                for j in range(h):
                    QK = q2[j] @ k2[j].T
                    for m, B in (("q", QK), ("k", QK.T), ("v", v2[j] @ o2[j])):
                        out[m][l1, i, l2, j] = torch.linalg.norm(A @ B) / (torch.linalg.norm(A) * torch.linalg.norm(B))
    return out


def top(c, n):
    flat = c.flatten()
    vals, idx = torch.sort(flat, descending=True, stable=True)
    idx = idx[:n]
    return idx // c.shape[1], idx % c.shape[1], vals[:n]


def circuits(W):
    nl, h = W.nl, W.h
    res = {k: [] for k in ("ov_rows", "ov_cols", "ov_vals", "qk_rows", "qk_cols", "qk_vals")}
    U = W.unembed()
    for l in range(nl):
        q, k, v, o = W.heads(l, True)
        rows = {k: [] for k in res}
        for i in range(h):
            ov = W.W_E @ v[i] @ o[i] @ U
            ov = ov - ov.mean(1, keepdim=True)
            qk = W.W_E @ q[i] @ k[i].T @ W.W_E.T
            for name, c in (("ov", ov), ("qk", qk)):
                r, cc, vals = top(c, TOP)
                rows[name + "_rows"].append(r)
                rows[name + "_cols"].append(cc)
                rows[name + "_vals"].append(vals)
        for key in res:
            res[key].append(torch.stack(rows[key]))
    return {k: torch.stack(v) for k, v in res.items()}


def basis(a):
    q, r = torch.linalg.qr(a)  # a [d_model, d] of full column rank here
    assert torch.all(torch.abs(torch.diagonal(r)) > 1e-10)
    return q


def subspaces(W):
    out = {}
    for kind in "qkvo":
        ov, an = [], []
        for l in range(W.nl):
            L, e, d = W.layers[l], W.e, W.d
            n = W.hkv if kind in "kv" else W.h
            blocks = [L[kind][i * d:(i + 1) * d, :].T if kind == "o" else L[kind][:, i * d:(i + 1) * d] for i in range(n)]
            bases = [basis(b) for b in blocks]
            overlap = torch.zeros(n, n, dtype=torch.float64)
            angle = torch.zeros(n, n, dtype=torch.float64)
            for i in range(n):
                for j in range(n):
                    s = torch.linalg.svdvals(bases[i].T @ bases[j]).clamp(0, 1)
                    overlap[i, j] = (s ** 2).mean()
                    angle[i, j] = torch.rad2deg(torch.arccos(s.max()))
            ov.append(overlap)
            an.append(angle)
        out["overlap_" + kind], out["angle_" + kind] = torch.stack(ov), torch.stack(an)
    return out


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for name in ("gpt2", "llama", "qwen3-wide", "gemma", "gemma2", "gemma3", "pythia", "phi2", "bert"):
        W = Weights(name)
        tensors = {}
        for m, s in composition(W, True).items():
            tensors["comp_" + m] = s
        for m, s in composition(W, False).items():
            tensors["raw_" + m] = s
        tensors.update(circuits(W))
        tensors.update(subspaces(W))
        arrays = {k: v.numpy().astype(np.int64 if v.dtype == torch.int64 else np.float64) for k, v in tensors.items()}
        path = os.path.join(OUT_DIR, "composition_" + name + ".safetensors")
        write_safetensors(path, arrays, {"generator": "testdata/gen_circuits.py", "model": "testdata/pretrained/" + name,
                                         "top": str(TOP)})
        print(path, {k: list(v.shape) for k, v in arrays.items()})


if __name__ == "__main__":
    main()
