#!/usr/bin/env python3
"""Generate the activation-patching goldens of package circuits.

Run from the repository root with the interpreter that has PyTorch 1.13:

    /usr/bin/python3 testdata/gen_circuits_patch.py

For the tiny folders of testdata/pretrained that models() lists (GPT-2, the Llama family with
Gemma 2 and 3, OLMo 2 and Mixtral, Pythia, Phi-2, BERT) it rebuilds the weights exactly as
gen_pretrained.py draws them and runs gen_pretrained.py's float64 forwards, with its hooks, on a
clean and a corrupted prompt of fixed token ids. The metric is LD = logits[pos, target] −
logits[pos, foil]. It writes testdata/circuits/patch-<model>.safetensors:

    clean, corrupt   I64 [T]    the prompts
    metric           I64 [3]    target, foil, position
    ld               F64 [2]    LD on the clean and on the corrupted prompt
    heads            F64 [L,H]  LD of the corrupted run with head h's output z_h = A_h·V_h of
                                layer l (hook "z") replaced at every position by the clean run's
    residual         F64 [L+1,T] LD of the corrupted run with the residual stream entering layer l
                                (hook "resid_pre"; row L: "resid_final", before the final norm)
                                replaced at one position by the clean run's
    patterns         F64 [L,H]  LD of the corrupted run with head h's attention weights of layer l
                                (hook "pattern") replaced by the clean run's: z_h = A_clean·V_corrupt
                                (with grouped K/V heads, V of the K/V head that h reads)

The raw LDs, not the normalised scores: the Go test normalises them as circuits.Patch does.
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import write_safetensors  # noqa: E402
from gen_pretrained import (bert_forward, bert_weights, gpt2_forward, gpt2_weights, llama_forward,  # noqa: E402
                            llama_weights, neox_forward, neox_weights, phi_forward, phi_weights)

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "circuits")

torch.set_num_threads(1)


def models():
    """Each folder's forward f(ids, hook) → logits [1,T,V], its layer and head counts, and the
    prompts and metric (target, foil, position)."""
    cfg, _, W, _ = gpt2_weights("gpt2", "F32", prefix=False, buffers=True, tied_stored=False)
    yield ("gpt2", lambda ids, hook: gpt2_forward(cfg, W, ids, hook=hook)[0], cfg["n_layer"], cfg["n_head"],
           [71, 104, 32, 99, 97, 116, 257, 111, 110], [71, 104, 32, 100, 111, 103, 257, 111, 110], (258, 101, 7))
    cfg, _, W, _ = llama_weights("llama", "F32", "LlamaForCausalLM", kv_heads=2, tied=False)
    yield ("llama", lambda ids, hook: llama_forward(cfg, W, ids, hook=hook)[0], cfg["num_hidden_layers"],
           cfg["num_attention_heads"], [1, 280, 262, 290, 277, 259, 281, 290, 263, 265],
           [1, 280, 262, 290, 266, 274, 286, 290, 263, 265], (284, 270, 9))
    # bfloat16 weights, one K/V head for four query heads, Llama 3's rope scaling.
    cfg3, _, W3, _ = llama_weights("llama3-bf16", "BF16", "LlamaForCausalLM", kv_heads=1, tied=True,
                                   scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 8})
    yield ("llama3-bf16", lambda ids, hook: llama_forward(cfg3, W3, ids, hook=hook)[0], cfg3["num_hidden_layers"],
           cfg3["num_attention_heads"], [1, 280, 262, 290, 277, 259, 281, 290, 263, 265],
           [1, 280, 262, 290, 266, 274, 286, 290, 263, 265], (284, 270, 9))
    # Qwen3's q_norm and k_norm, and heads of 8 in a hidden size of 16 (h·d = 32 ≠ d_model).
    cfgq, _, Wq, _ = llama_weights("qwen3-wide", "F32", "Qwen3ForCausalLM", kv_heads=2, tied=False, head_dim=8)
    yield ("qwen3-wide", lambda ids, hook: llama_forward(cfgq, Wq, ids, hook=hook)[0], cfgq["num_hidden_layers"],
           cfgq["num_attention_heads"], [1, 280, 262, 290, 277, 259, 281, 290, 263, 265],
           [1, 280, 262, 290, 266, 274, 286, 290, 263, 265], (284, 270, 9))
    # Gemma: GeGLU, embeddings scaled by √d_model, norm gains 1 + w, one K/V head.
    cfgg, _, Wg, _ = llama_weights("gemma", "F32", "GemmaForCausalLM", kv_heads=1, tied=True, head_dim=8)
    yield ("gemma", lambda ids, hook: llama_forward(cfgg, Wg, ids, hook=hook)[0], cfgg["num_hidden_layers"],
           cfgg["num_attention_heads"], [1, 280, 262, 290, 277, 259, 281, 290, 263, 265],
           [1, 280, 262, 290, 266, 274, 286, 290, 263, 265], (284, 270, 9))
    # Phi-3: fused qkv_proj and gate_up_proj, half of each head rotated, a window of 4, bf16.
    # Its metric: the token the clean prompt favours most over the corrupted one at the last
    # position against the reverse, so that the two LDs lie far enough apart for the scores.
    cfgp, _, Wp, _ = llama_weights("phi3", "BF16", "Phi3ForCausalLM", kv_heads=2, tied=False, window=4)
    clean, corrupt = [1, 280, 262, 290, 277, 259, 281, 290, 263, 265], [1, 280, 262, 290, 266, 274, 286, 290, 263, 265]
    last = [llama_forward(cfgp, Wp, torch.tensor([ids]))[0][0, -1] for ids in (clean, corrupt)]
    yield ("phi3", lambda ids, hook: llama_forward(cfgp, Wp, ids, hook=hook)[0], cfgp["num_hidden_layers"],
           cfgp["num_attention_heads"], clean, corrupt, (int((last[0] - last[1]).argmax()), int((last[1] - last[0]).argmax()), 9))
    # Gemma 2: soft-capped scores and logits, sandwich norms, sliding layers; its metric chosen
    # as Phi-3's.
    cfg2, _, W2, _ = llama_weights("gemma2", "F32", "Gemma2ForCausalLM", kv_heads=2, tied=True, window=4, head_dim=8)
    last = [llama_forward(cfg2, W2, torch.tensor([ids]))[0][0, -1] for ids in (clean, corrupt)]
    yield ("gemma2", lambda ids, hook: llama_forward(cfg2, W2, ids, hook=hook)[0], cfg2["num_hidden_layers"],
           cfg2["num_attention_heads"], clean, corrupt, (int((last[0] - last[1]).argmax()), int((last[1] - last[0]).argmax()), 9))
    # Gemma 3: sandwich norms, local layers with their own rotary, qk-norm, bf16; its metric
    # chosen as Phi-3's.
    cfg3, _, W3, _ = llama_weights("gemma3", "BF16", "Gemma3ForCausalLM", kv_heads=2, tied=True, window=4, head_dim=8)
    last = [llama_forward(cfg3, W3, torch.tensor([ids]))[0][0, -1] for ids in (clean, corrupt)]
    yield ("gemma3", lambda ids, hook: llama_forward(cfg3, W3, ids, hook=hook)[0], cfg3["num_hidden_layers"],
           cfg3["num_attention_heads"], clean, corrupt, (int((last[0] - last[1]).argmax()), int((last[1] - last[0]).argmax()), 9))
    # OLMo 2 (outputs normalised, qk-norm across the heads) and Mixtral (4 experts, 2 a token);
    # their metrics chosen as Phi-3's.
    for name, arch in (("olmo2", "Olmo2ForCausalLM"), ("mixtral", "MixtralForCausalLM")):
        cfgo, _, Wo, _ = llama_weights(name, "F32", arch, kv_heads=2, tied=False)
        last = [llama_forward(cfgo, Wo, torch.tensor([ids]))[0][0, -1] for ids in (clean, corrupt)]
        yield (name, lambda ids, hook, cfgo=cfgo, Wo=Wo: llama_forward(cfgo, Wo, ids, hook=hook)[0], cfgo["num_hidden_layers"],
               cfgo["num_attention_heads"], clean, corrupt, (int((last[0] - last[1]).argmax()), int((last[1] - last[0]).argmax()), 9))
    # Pythia (GPT-NeoX): the attention and the MLP in parallel, partial rotary, float16; its
    # metric chosen as Phi-3's.
    cfgn, _, Wn, _ = neox_weights("pythia", "F16", parallel=True, rotary_pct=0.25, buffers=False)
    clean_n, corrupt_n = [71, 104, 32, 99, 97, 116, 257, 111, 110], [71, 104, 32, 100, 111, 103, 257, 111, 110]
    last = [neox_forward(cfgn, Wn, torch.tensor([ids]))[0][0, -1] for ids in (clean_n, corrupt_n)]
    yield ("pythia", lambda ids, hook: neox_forward(cfgn, Wn, ids, hook=hook)[0], cfgn["num_hidden_layers"],
           cfgn["num_attention_heads"], clean_n, corrupt_n,
           (int((last[0] - last[1]).argmax()), int((last[1] - last[0]).argmax()), 8))
    # Phi-2: one LayerNorm for the parallel attention and MLP, a biased head, float16.
    cfgp2, _, Wp2, _ = phi_weights("phi2", "F16")
    last = [phi_forward(cfgp2, Wp2, torch.tensor([ids]))[0][0, -1] for ids in (clean_n, corrupt_n)]
    yield ("phi2", lambda ids, hook: phi_forward(cfgp2, Wp2, ids, hook=hook)[0], cfgp2["num_hidden_layers"],
           cfgp2["num_attention_heads"], clean_n, corrupt_n,
           (int((last[0] - last[1]).argmax()), int((last[1] - last[0]).argmax()), 8))
    cfg, _, W = bert_weights("bert", "F32", old_names=False)

    def bert(ids, hook):
        ones = torch.ones_like(ids)
        return bert_forward(cfg, W, ids, ones, torch.zeros_like(ids), hook=hook)[0]
    # [CLS] the cat sat on the [MASK] . [SEP]; corrupted: dog for cat. The metric reads the [MASK].
    yield ("bert", bert, cfg["num_hidden_layers"], cfg["num_attention_heads"],
           [2, 5, 7, 8, 9, 5, 4, 11, 3], [2, 5, 14, 8, 9, 5, 4, 11, 3], (10, 14, 6))


def record(forward, ids):
    """Runs forward on ids, keeping every hook point's value."""
    kept = {}

    def hook(point, layer, x):
        kept[(point, layer)] = x.clone()
    forward(ids, hook)
    return kept


def patched(forward, ids, metric, point, layer, patch):
    """LD of forward on ids with patch(x) applied to hook point (point, layer)."""
    def hook(p, l, x):
        if p == point and l == layer:
            return patch(x.clone())
        return None
    target, foil, pos = metric
    logits = forward(ids, hook)
    return float(logits[0, pos, target] - logits[0, pos, foil])


def main():
    torch.set_default_dtype(torch.float64)
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, forward, nl, nh, clean, corrupt, metric in models():
        ci, bi = torch.tensor([clean]), torch.tensor([corrupt])
        t = len(clean)
        kept = record(forward, ci)
        target, foil, pos = metric
        ld = [patched(forward, ci, metric, None, None, None), patched(forward, bi, metric, None, None, None)]

        def put(point, layer, index):
            def f(x):
                x[index] = kept[(point, layer)][index]
                return x
            return f
        heads = np.zeros((nl, nh))
        patterns = np.zeros((nl, nh))
        for l in range(nl):
            for h in range(nh):
                heads[l, h] = patched(forward, bi, metric, "z", l, put("z", l, (0, h)))
                patterns[l, h] = patched(forward, bi, metric, "pattern", l, put("pattern", l, (0, h)))
        residual = np.zeros((nl + 1, t))
        for l in range(nl + 1):
            point = "resid_pre" if l < nl else "resid_final"
            for p in range(t):
                residual[l, p] = patched(forward, bi, metric, point, l, put(point, l, (0, p)))
        print(f"{name}: LD clean {ld[0]:.4f}, corrupted {ld[1]:.4f}; residual at the output, metric position: "
              f"{residual[nl, pos]:.4f}")
        write_safetensors(os.path.join(OUT_DIR, f"patch-{name}.safetensors"), {
            "clean": np.array(clean, dtype=np.int64), "corrupt": np.array(corrupt, dtype=np.int64),
            "metric": np.array([target, foil, pos], dtype=np.int64), "ld": np.array(ld),
            "heads": heads, "residual": residual, "patterns": patterns}, {"model": name})


if __name__ == "__main__":
    main()
