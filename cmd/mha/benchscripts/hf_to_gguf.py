"""hf_to_gguf.py DIR OUT.gguf [--outtype bf16|f32]: writes a Llama-family or GPT-2 Hugging Face
folder (config.json and model*.safetensors, bf16, f16 or f32 tensors) as a GGUF that llama.cpp's
llama-bench loads, for mha bench --model DIR --gguf OUT.gguf. It is for folders without a
tokenizer, such as the random models mha's tests write (MHA_KEEP_MODEL_DIR=DIR go test
./pretrained -run TestOpenMemory, with MHA_TEST_GPT2=1 for GPT-2 small): the GGUF gets a
placeholder vocabulary of the config's vocab_size tokens, so its text is meaningless and only its
speed counts. Convert a real model with llama.cpp's own convert_hf_to_gguf.py instead.

It needs numpy and llama.cpp's gguf-py, from the checkout you built llama-bench from:

    PYTHONPATH=LLAMA_CPP/gguf-py /usr/bin/python3 hf_to_gguf.py DIR OUT.gguf

The tensors get llama.cpp's names (gguf-py's map for the llama or gpt2 architecture) and its
layouts: a Llama's q_proj and k_proj rows reordered from Hugging Face's rotate-half rotary to
GGML's interleaved pairs, GPT-2's Conv1D weights ([in, out]) transposed to [out, in] and its
causal-mask buffers left out, norms and 1-D tensors in float32, the matrices in bf16 or, with
--outtype f32, float32. A tied model gets no output.weight: llama.cpp reads token_embd for it.
"""
import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np

import gguf

DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}


def tensors(folder):
    """Yields (name, safetensors dtype, array) for every tensor of the folder's shards."""
    files = sorted(folder.glob("model*.safetensors"))
    if not files:
        sys.exit(f"hf_to_gguf.py: no model*.safetensors in {folder}")
    for path in files:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if info["dtype"] not in DTYPES:
                sys.exit(f"hf_to_gguf.py: {path}: {name} is {info['dtype']}, want BF16, F16 or F32")
            start, end = info["data_offsets"]
            yield name, info["dtype"], data[start:end].view(DTYPES[info["dtype"]]).reshape(info["shape"])


def float32(dtype, a):
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def bfloat16(dtype, a):
    if dtype == "BF16":
        return np.ascontiguousarray(a)
    return gguf.quants.quantize(float32(dtype, a), gguf.GGMLQuantizationType.BF16).view(np.uint16).reshape(a.shape)


def interleave(w, heads):
    """Reorders each head's rows from rotate-half (x_i, x_{i+d/2}) to adjacent pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--outtype", choices=["bf16", "f32"], default="bf16")
    args = ap.parse_args()

    cfg = json.loads((args.folder / "config.json").read_text())
    family = cfg.get("model_type")
    if family not in ("llama", "gpt2"):
        sys.exit(f"hf_to_gguf.py: model_type {family!r}, want llama or gpt2 (use llama.cpp's convert_hf_to_gguf.py)")
    if cfg.get("rope_scaling"):
        sys.exit("hf_to_gguf.py: rope_scaling is not written; use llama.cpp's convert_hf_to_gguf.py")
    vocab = cfg["vocab_size"]

    if family == "llama":
        arch = gguf.MODEL_ARCH.LLAMA
        layers, heads, embed = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["hidden_size"]
        kv_heads = cfg.get("num_key_value_heads", heads)
    else:
        arch = gguf.MODEL_ARCH.GPT2
        layers, heads, embed = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    w = gguf.GGUFWriter(args.out, gguf.MODEL_ARCH_NAMES[arch])
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(args.folder.name)
    w.add_block_count(layers)
    w.add_embedding_length(embed)
    w.add_head_count(heads)
    if family == "llama":
        w.add_context_length(cfg.get("max_position_embeddings", 2048))
        w.add_feed_forward_length(cfg["intermediate_size"])
        w.add_head_count_kv(kv_heads)
        w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
        w.add_rope_dimension_count(cfg.get("head_dim") or embed // heads)
        w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    else:
        w.add_context_length(cfg.get("n_positions", 1024))
        w.add_feed_forward_length(cfg.get("n_inner") or 4 * embed)
        w.add_layer_norm_eps(float(cfg.get("layer_norm_epsilon", 1e-5)))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if args.outtype == "bf16" else gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(vocab)
    # The placeholder vocabulary: SentencePiece's specials, its 256 byte tokens, then fillers.
    kinds = gguf.TokenType
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [kinds.UNKNOWN, kinds.CONTROL, kinds.CONTROL] + [kinds.BYTE] * 256
    if vocab < len(toks):
        sys.exit(f"hf_to_gguf.py: vocab_size {vocab}, want at least {len(toks)} for the placeholder vocabulary")
    toks += [f"t{i}" for i in range(len(toks), vocab)]
    types += [kinds.NORMAL] * (vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([-float(i) for i in range(vocab)])
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    names = gguf.get_tensor_name_map(arch, layers)
    for name, dtype, a in tensors(args.folder):
        if name.endswith(("rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")):
            continue
        if family == "llama":
            if name.endswith("q_proj.weight"):
                a = interleave(a, heads)
            elif name.endswith("k_proj.weight"):
                a = interleave(a, kv_heads)
        else:
            name = name.removeprefix("transformer.")
            if name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
                a = a.T
        out = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if out is None:
            sys.exit(f"hf_to_gguf.py: no GGUF name for tensor {name}")
        if a.ndim == 1 or out.endswith("_norm.weight") or args.outtype == "f32":
            w.add_tensor(out, np.ascontiguousarray(float32(dtype, a)), raw_dtype=gguf.GGMLQuantizationType.F32)
        else:
            w.add_tensor(out, np.ascontiguousarray(bfloat16(dtype, a)), raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
