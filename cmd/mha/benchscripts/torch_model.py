"""Time a Llama-family or GPT-2 Hugging Face folder in plain PyTorch for `mha bench --model --torch`.

    python3 torch_model.py run --model DIR --seq 128,512 --steps S --threads N --runs R --warmup W

Hugging Face transformers is not used: the script reads config.json and the safetensors files
itself (model.safetensors, or the shards of model.safetensors.index.json), converts every
weight to float32, and runs the architecture written out by hand: RMSNorm, rotary positions
(rotate-half, rope_theta, Llama 3's rope_scaling), grouped K/V heads, SwiGLU, the q/k/v biases
of Qwen2, a tied or untied head; for GPT-2, LayerNorm, learned positions, Conv1D weights used
as stored ([in, out], x·W + b), gelu_new and the tied head. Its KV cache is one preallocated float32 tensor of keys and one
of values per layer. Everything runs under torch.inference_mode() on --threads threads.

It prints one JSON line with mha's worker's fields: weights, params, read_bytes (what a decode
step reads of the weights), load_s, rss_load_kib, rss_load_peak_kib, rss_peak_kib, prefill
([{"T", "ms"}]: T tokens into an empty cache, logits of every position), decode_ms (one greedy
step of one token after an 8-token prompt) and tokens (the greedy tokens).
"""

import argparse
import json
import math
import os
import resource
import struct
import sys
import time

import torch

PROMPT = 8  # tokens decoding starts after, as mha's worker

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def peak_kib():
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r // 1024 if sys.platform == "darwin" else r


def read_safetensors(path, out):
    """Adds the tensors of one .safetensors file to out, as float32."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, e in header.items():
            if name == "__metadata__":
                continue
            if name.endswith(("attn.bias", "attn.masked_bias")) and e["dtype"] not in ("F32", "F16", "BF16") or e["dtype"] == "BOOL":
                continue  # GPT-2's mask buffers: the causal mask is built here
            if e["dtype"] not in DTYPES:
                raise SystemExit(f"{path}: tensor {name} has dtype {e['dtype']}, want F32, F16, BF16 or F64")
            begin, end = e["data_offsets"]
            f.seek(base + begin)
            buf = bytearray(f.read(end - begin))
            t = torch.frombuffer(buf, dtype=DTYPES[e["dtype"]]) if buf else torch.empty(0, dtype=DTYPES[e["dtype"]])
            out[name] = t.reshape(e["shape"]).to(torch.float32)


def load(folder):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    arch = (cfg.get("architectures") or [cfg.get("model_type", "")])[0]
    if cfg.get("model_type") not in ("llama", "mistral", "qwen2", "gpt2"):
        raise SystemExit(f"torch_model.py runs Llama-family and GPT-2 folders (llama, mistral, qwen2, gpt2), got {arch}")
    w = {}
    single = os.path.join(folder, "model.safetensors")
    if os.path.exists(single):
        read_safetensors(single, w)
    else:
        with open(os.path.join(folder, "model.safetensors.index.json")) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        for name in files:
            read_safetensors(os.path.join(folder, name), w)
    prefix = "transformer." if cfg["model_type"] == "gpt2" else "model."
    w = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in w.items()}
    return cfg, w


def inv_freq(cfg, dim):
    theta = cfg.get("rope_theta", 10000.0)
    f = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / f
        scaled = torch.where(wavelen > old / lo, f / factor, f)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        f = torch.where(medium, smoothed, scaled)
    elif rs:
        raise SystemExit(f"torch_model.py: rope_scaling {rs} is not implemented")
    return f


class Model:
    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        self.d = cfg["hidden_size"]
        self.h = cfg["num_attention_heads"]
        self.hkv = cfg.get("num_key_value_heads") or self.h
        self.hd = cfg.get("head_dim") or self.d // self.h
        self.layers = cfg["num_hidden_layers"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.head = w.get("lm_head.weight", w["embed_tokens.weight"])
        self.freq = inv_freq(cfg, self.hd)

    def params(self):
        seen, n = set(), 0
        for t in self.w.values():
            if id(t) not in seen:
                seen.add(id(t))
                n += t.numel()
        return n

    def read_bytes(self):
        """Bytes of weights one decode step reads: all but the embedding's other rows."""
        emb = self.w["embed_tokens.weight"]
        n = 4 * self.params()
        if "lm_head.weight" in self.w:
            n -= 4 * (emb.shape[0] - 1) * emb.shape[1]
        return n

    def new_cache(self, capacity):
        shape = (1, self.hkv, capacity, self.hd)
        self.k = [torch.zeros(shape) for _ in range(self.layers)]
        self.v = [torch.zeros(shape) for _ in range(self.layers)]
        self.n = 0

    def norm(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def rope(self, x, pos):
        ang = pos[:, None].double() * self.freq[None, :]
        cos = torch.cat([ang.cos(), ang.cos()], -1).float()
        sin = torch.cat([ang.sin(), ang.sin()], -1).float()
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rot * sin

    def forward(self, tokens):
        """Logits [T, vocab] of the next len(tokens) positions, extending the cache."""
        w, t, start = self.w, len(tokens), self.n
        x = w["embed_tokens.weight"][torch.tensor(tokens)][None]  # [1, T, d]
        pos = torch.arange(start, start + t)
        mask = None
        if t > 1:
            mask = torch.full((t, start + t), float("-inf")).triu(start + 1)
        lin = torch.nn.functional.linear
        for l in range(self.layers):
            p = f"layers.{l}."
            y = self.norm(x, w[p + "input_layernorm.weight"])
            q = lin(y, w[p + "self_attn.q_proj.weight"], w.get(p + "self_attn.q_proj.bias"))
            k = lin(y, w[p + "self_attn.k_proj.weight"], w.get(p + "self_attn.k_proj.bias"))
            v = lin(y, w[p + "self_attn.v_proj.weight"], w.get(p + "self_attn.v_proj.bias"))
            q = self.rope(q.view(1, t, self.h, self.hd).transpose(1, 2), pos)
            k = self.rope(k.view(1, t, self.hkv, self.hd).transpose(1, 2), pos)
            self.k[l][:, :, start:start + t] = k
            self.v[l][:, :, start:start + t] = v.view(1, t, self.hkv, self.hd).transpose(1, 2)
            keys, values = self.k[l][:, :, :start + t], self.v[l][:, :, :start + t]
            if self.hkv != self.h:
                keys = keys.repeat_interleave(self.h // self.hkv, 1)
                values = values.repeat_interleave(self.h // self.hkv, 1)
            s = q @ keys.transpose(-1, -2) / math.sqrt(self.hd)
            if mask is not None:
                s = s + mask
            a = torch.softmax(s, -1) @ values  # [1, H, T, hd]
            x = x + lin(a.transpose(1, 2).reshape(1, t, self.h * self.hd), w[p + "self_attn.o_proj.weight"], w.get(p + "self_attn.o_proj.bias"))
            y = self.norm(x, w[p + "post_attention_layernorm.weight"])
            g = torch.nn.functional.silu(lin(y, w[p + "mlp.gate_proj.weight"])) * lin(y, w[p + "mlp.up_proj.weight"])
            x = x + lin(g, w[p + "mlp.down_proj.weight"])
        self.n += t
        return lin(self.norm(x, w["norm.weight"]), self.head)[0]


class GPT2:
    """GPT2LMHeadModel's forward with a KV cache, as modeling_gpt2.py computes it."""

    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        self.d, self.h = cfg["n_embd"], cfg["n_head"]
        self.hd, self.layers = self.d // self.h, cfg["n_layer"]
        self.eps = cfg.get("layer_norm_epsilon", 1e-5)

    def params(self):
        return sum(t.numel() for n, t in self.w.items() if not n.endswith(("attn.bias", "attn.masked_bias", "lm_head.weight")))

    def read_bytes(self):
        """Bytes of weights one decode step reads: all but the other positions' rows."""
        wpe = self.w["wpe.weight"]
        return 4 * self.params() - 4 * (wpe.shape[0] - 1) * wpe.shape[1]

    def new_cache(self, capacity):
        shape = (1, self.h, capacity, self.hd)
        self.k = [torch.zeros(shape) for _ in range(self.layers)]
        self.v = [torch.zeros(shape) for _ in range(self.layers)]
        self.n = 0

    def ln(self, x, name):
        return torch.nn.functional.layer_norm(x, (self.d,), self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def forward(self, tokens):
        w, t, start = self.w, len(tokens), self.n
        x = (w["wte.weight"][torch.tensor(tokens)] + w["wpe.weight"][start:start + t])[None]
        mask = None
        if t > 1:
            mask = torch.full((t, start + t), float("-inf")).triu(start + 1)
        for l in range(self.layers):
            p = f"h.{l}."
            a = self.ln(x, p + "ln_1")
            q, k, v = (a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(self.d, dim=-1)
            q, k, v = (y.view(1, t, self.h, self.hd).transpose(1, 2) for y in (q, k, v))
            self.k[l][:, :, start:start + t], self.v[l][:, :, start:start + t] = k, v
            s = q @ self.k[l][:, :, :start + t].transpose(-1, -2) / math.sqrt(self.hd)
            if mask is not None:
                s = s + mask
            o = (torch.softmax(s, -1) @ self.v[l][:, :, :start + t]).transpose(1, 2).reshape(1, t, self.d)
            x = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            m = self.ln(x, p + "ln_2")
            hdn = m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
            hdn = 0.5 * hdn * (1 + torch.tanh(math.sqrt(2 / math.pi) * (hdn + 0.044715 * hdn.pow(3))))
            x = x + hdn @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        self.n += t
        return (self.ln(x, "ln_f") @ w["wte.weight"].T)[0]


def run(args):
    torch.set_num_threads(args.threads)
    seqs = [int(s) for s in args.seq.split(",")]
    t0 = time.perf_counter()
    cfg, w = load(args.model)
    m = GPT2(cfg, w) if cfg["model_type"] == "gpt2" else Model(cfg, w)
    res = {"weights": "float32", "params": m.params(), "read_bytes": m.read_bytes(),
           "load_s": time.perf_counter() - t0, "rss_load_kib": rss_kib(), "rss_load_peak_kib": peak_kib()}
    vocab = cfg["vocab_size"]
    capacity = max(max(seqs), PROMPT + 1 + args.warmup + args.steps)
    tokens = [(7 * i + 3) % vocab for i in range(capacity)]
    window = cfg.get("sliding_window")
    if window and (cfg["model_type"] == "mistral" or cfg.get("use_sliding_window")) and capacity > window:
        raise SystemExit(f"torch_model.py: sliding_window {window} is shorter than the {capacity} positions timed, and not implemented")
    m.new_cache(capacity)
    res["prefill"] = []
    with torch.inference_mode():
        for t in seqs:
            ms = []
            for i in range(args.warmup + args.runs):
                m.n = 0
                start = time.perf_counter()
                m.forward(tokens[:t])
                if i >= args.warmup:
                    ms.append((time.perf_counter() - start) * 1e3)
            res["prefill"].append({"T": t, "ms": ms})
        m.n = 0
        nxt = int(m.forward(tokens[:PROMPT])[-1].argmax())
        out, ms = [nxt], []
        for i in range(args.warmup + args.steps):
            start = time.perf_counter()
            nxt = int(m.forward([nxt])[-1].argmax())
            if i >= args.warmup:
                ms.append((time.perf_counter() - start) * 1e3)
            out.append(nxt)
    res["decode_ms"], res["tokens"], res["rss_peak_kib"] = ms, out, peak_kib()
    print(json.dumps(res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["run"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--seq", default="128,512")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    run(ap.parse_args())


if __name__ == "__main__":
    main()
