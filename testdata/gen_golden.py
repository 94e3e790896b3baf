#!/usr/bin/env python3
"""Generate the PyTorch golden files for the Go MultiheadAttention port.

Run from the repository root with the interpreter that has PyTorch 1.13:

    /usr/bin/python3 testdata/gen_golden.py

For every case in CASES this writes testdata/golden/<case>.safetensors holding
float32 parameters and inputs plus float64 results computed by
torch.nn.MultiheadAttention (double precision, eval mode, dropout 0,
batch_first=True, autograd on so the standard non-fast path runs). It then
re-reads every file with an independent reader, recomputes the forward pass
with plain numpy float64 and regenerates testdata/golden/README.md.
The output is deterministic: each case draws from its own generator seeded
from the case name, and torch runs single-threaded.
"""

import dataclasses
import json
import math
import os
import struct
import zlib

import numpy as np
import torch

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")

# Fraction of keys padded by a random key_padding_mask / blocked by a random
# bool attn_mask / set to -inf in a random float attn_mask.
PAD_PROB = 0.35
BOOL_MASK_PROB = 0.35
NEG_INF_PROB = 0.15
FLOAT_MASK_STD = 1.5

# Tolerance of the numpy float64 cross-check against the PyTorch results.
NUMPY_TOLERANCE = 1e-12


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    description: str
    batch: int | None  # None: unbatched input, query is [Tq, E]
    tq: int
    embed_dim: int
    num_heads: int
    tk: int | None = None  # None: self-attention (key = value = query)
    kdim: int | None = None  # cross-attention only; default embed_dim
    vdim: int | None = None  # cross-attention only; default embed_dim
    bias: bool = True
    add_bias_kv: bool = False
    add_zero_attn: bool = False
    causal: bool = False
    key_padding: str | None = None  # "bool" or "u8"
    attn_mask: str | None = None  # "bool_2d", "bool_3d", "float_2d" or "float_3d"
    input_scale: float = 1.0

    @property
    def cross(self):
        return self.tk is not None

    @property
    def src_len(self):
        return self.tk if self.cross else self.tq

    @property
    def key_dim(self):
        return self.kdim or self.embed_dim

    @property
    def value_dim(self):
        return self.vdim or self.embed_dim

    @property
    def extended_src_len(self):
        """Tk': key length after add_bias_kv and add_zero_attn."""
        return self.src_len + int(self.add_bias_kv) + int(self.add_zero_attn)


CASES = [
    Case("self_basic", "self-attention, two heads", 2, 5, 8, 2),
    Case("self_one_head", "self-attention with a single head", 2, 5, 8, 1),
    Case("self_odd_embed_one_head", "odd embed_dim 5 with a single head", 2, 4, 5, 1),
    Case("self_three_heads", "embed_dim 6 split into three heads of dim 2", 2, 5, 6, 3),
    Case("self_long_odd", "long sequence (130), odd embed_dim 5, five heads of dim 1",
         1, 130, 5, 5),
    Case("cross_single_query", "cross-attention with a single query position",
         2, 1, 8, 2, tk=7),
    Case("cross_basic", "cross-attention with Tq != Tk, four heads", 2, 3, 8, 4, tk=6),
    Case("cross_kdim_vdim", "kdim 5 != vdim 7 != embed_dim 8: separate q/k/v projection weights",
         2, 3, 8, 2, tk=4, kdim=5, vdim=7),
    Case("key_padding_bool", "bool key_padding_mask", 3, 5, 8, 2, key_padding="bool"),
    Case("key_padding_u8", "uint8 key_padding_mask (1 = padding); PyTorch 1.13 rejects uint8 "
         "key_padding_mask, so the results were computed with the same mask as bool",
         3, 5, 8, 2, key_padding="u8"),
    Case("attn_mask_bool_2d", "bool attn_mask [Tq,Tk] shared by all batches and heads",
         2, 4, 8, 2, tk=6, attn_mask="bool_2d"),
    Case("attn_mask_bool_3d", "bool attn_mask [B*H,Tq,Tk], one mask per batch and head",
         2, 4, 8, 2, tk=6, attn_mask="bool_3d"),
    Case("attn_mask_float_2d", "additive float attn_mask [Tq,Tk] with finite values and some -inf",
         2, 5, 8, 2, attn_mask="float_2d"),
    Case("attn_mask_float_3d", "additive float attn_mask [B*H,Tq,Tk] with finite values and some -inf",
         2, 5, 8, 2, attn_mask="float_3d"),
    Case("key_padding_and_attn_mask_bool", "bool key_padding_mask combined with bool attn_mask [B*H,Tq,Tk]",
         2, 5, 8, 2, key_padding="bool", attn_mask="bool_3d"),
    Case("key_padding_and_attn_mask_float", "bool key_padding_mask combined with float attn_mask [Tq,Tk]",
         2, 4, 8, 2, tk=6, key_padding="bool", attn_mask="float_2d"),
    Case("causal", "causal self-attention (mask not stored; metadata causal=true)",
         2, 6, 8, 2, causal=True),
    Case("causal_key_padding", "causal self-attention combined with a bool key_padding_mask",
         2, 6, 8, 2, causal=True, key_padding="bool"),
    Case("causal_cross", "causal with Tq=4 < Tk=6, top-left aligned: query i sees keys j <= i",
         2, 4, 8, 2, tk=6, causal=True),
    Case("add_bias_kv", "add_bias_kv: learned bias_k/bias_v appended to keys/values",
         2, 5, 8, 2, add_bias_kv=True),
    Case("add_bias_kv_masks", "add_bias_kv with bool key_padding_mask and bool attn_mask [Tq,Tk]",
         2, 5, 8, 2, add_bias_kv=True, key_padding="bool", attn_mask="bool_2d"),
    Case("add_zero_attn", "add_zero_attn: a zero key/value appended after projection",
         2, 5, 8, 2, add_zero_attn=True),
    Case("add_zero_attn_bias_kv_masks", "add_zero_attn + add_bias_kv, cross-attention with bool "
         "key_padding_mask and float attn_mask [B*H,Tq,Tk]",
         2, 4, 8, 2, tk=5, add_bias_kv=True, add_zero_attn=True, key_padding="bool",
         attn_mask="float_3d"),
    Case("no_bias", "bias=False: no in_proj_bias and no out_proj.bias", 2, 5, 8, 2, bias=False),
    Case("no_bias_bias_kv", "bias=False together with add_bias_kv", 2, 5, 8, 2, bias=False,
         add_bias_kv=True),
    Case("large_logits", "inputs scaled by 12 so scaled scores reach ~±50..100, softmax nearly one-hot",
         2, 6, 8, 2, input_scale=12.0),
    Case("unbatched_self", "unbatched query [T,E] self-attention", None, 5, 8, 2),
    Case("unbatched_key_padding", "unbatched query [T,E] with an unbatched key_padding_mask [Tk]",
         None, 5, 8, 2, key_padding="bool"),
]


# ---------------------------------------------------------------------------
# Random parameters, inputs and masks (float32, from the case's generator)
# ---------------------------------------------------------------------------

def case_generator(case):
    return torch.Generator().manual_seed(zlib.crc32(case.name.encode()))


def randn32(gen, shape, std=1.0):
    return torch.randn(shape, generator=gen, dtype=torch.float32) * std


def make_module(case, gen):
    """An nn.MultiheadAttention whose parameters (biases included) are all random float32."""
    module = torch.nn.MultiheadAttention(
        case.embed_dim, case.num_heads, dropout=0.0, bias=case.bias,
        add_bias_kv=case.add_bias_kv, add_zero_attn=case.add_zero_attn,
        kdim=case.kdim, vdim=case.vdim, batch_first=True)
    params = dict(module.named_parameters())
    with torch.no_grad():
        for name in sorted(params):
            param = params[name]
            fan_in = param.shape[1] if param.dim() == 2 else case.embed_dim
            param.copy_(randn32(gen, param.shape, 0.5 / math.sqrt(fan_in)))
    return module.eval()


def make_inputs(case, gen):
    """query, and for cross-attention key and value, in the layout the module is called with."""
    lead = (case.batch,) if case.batch is not None else ()
    inputs = {"query": randn32(gen, lead + (case.tq, case.embed_dim), case.input_scale)}
    if case.cross:
        inputs["key"] = randn32(gen, lead + (case.tk, case.key_dim), case.input_scale)
        inputs["value"] = randn32(gen, lead + (case.tk, case.value_dim), case.input_scale)
    return inputs


def make_key_padding_mask(case, gen):
    """Bool [B,Tk] (true = padding). Key 0 is never padded, the last key of batch 0 always is."""
    pad = torch.rand((case.batch or 1, case.src_len), generator=gen) < PAD_PROB
    pad[:, 0] = False
    pad[0, -1] = True
    return pad


def causal_mask(tq, tk):
    """Bool [Tq,Tk], true above the diagonal: query i may attend keys j <= i (top-left aligned)."""
    return torch.ones((tq, tk), dtype=torch.bool).triu(diagonal=1)


def blocked_positions(case, attn_blocked, pad):
    """Bool [B*H,Tq,Tk]: positions hidden by the attention, padding and causal masks together."""
    n_bh = (case.batch or 1) * case.num_heads
    blocked = torch.zeros((n_bh, case.tq, case.src_len), dtype=torch.bool)
    if attn_blocked is not None:
        blocked |= attn_blocked
    if pad is not None:
        blocked |= pad.repeat_interleave(case.num_heads, dim=0)[:, None, :]
    if case.causal:
        blocked |= causal_mask(case.tq, case.src_len)
    return blocked


def make_attn_mask(case, gen, pad):
    """The stored attn_mask: bool (true = may not attend) or float32 additive with some -inf.

    Wherever the masks together would hide every key of a query row, key 0
    (never padded, never hidden by causal) is unmasked again.
    """
    kind, rank = case.attn_mask.split("_")
    shape = (case.tq, case.src_len)
    if rank == "3d":
        shape = ((case.batch or 1) * case.num_heads,) + shape
    is_bool = kind == "bool"
    attn_blocked = torch.rand(shape, generator=gen) < (BOOL_MASK_PROB if is_bool else NEG_INF_PROB)
    empty_rows = blocked_positions(case, attn_blocked, pad).all(dim=-1)
    if rank == "2d":
        empty_rows = empty_rows.any(dim=0)
    attn_blocked[..., 0] &= ~empty_rows
    if is_bool:
        return attn_blocked
    values = randn32(gen, shape, FLOAT_MASK_STD)
    return values.masked_fill(attn_blocked, float("-inf"))


def make_masks(case, gen):
    """Stored masks by tensor name, in their stored dtype and the shape PyTorch takes them."""
    masks = {}
    pad = make_key_padding_mask(case, gen) if case.key_padding else None
    if pad is not None:
        stored = pad.to(torch.uint8) if case.key_padding == "u8" else pad
        masks["key_padding_mask"] = stored if case.batch is not None else stored[0]
    if case.attn_mask:
        masks["attn_mask"] = make_attn_mask(case, gen, pad)
    return masks


# ---------------------------------------------------------------------------
# PyTorch float64 reference
# ---------------------------------------------------------------------------

def torch_masks(case, masks):
    """Masks as passed to PyTorch: uint8 padding as bool, causal as a bool attn_mask."""
    assert not (case.causal and case.attn_mask), "causal and a stored attn_mask are not combined"
    key_padding_mask = masks.get("key_padding_mask")
    if key_padding_mask is not None:
        key_padding_mask = key_padding_mask.bool()
    attn_mask = masks.get("attn_mask")
    if attn_mask is not None and attn_mask.is_floating_point():
        attn_mask = attn_mask.double()
    if case.causal:
        attn_mask = causal_mask(case.tq, case.src_len)
    return key_padding_mask, attn_mask


def run_pytorch(case, module, inputs, masks, grad_output):
    """Forward (averaged and per-head weights) and backward in float64; returns the expected tensors."""
    module = module.double()
    leaves = {name: x.double().requires_grad_() for name, x in inputs.items()}
    query = leaves["query"]
    key = leaves.get("key", query)  # self-attention: the very same tensor object
    value = leaves.get("value", query)
    key_padding_mask, attn_mask = torch_masks(case, masks)

    def forward(average):
        return module(query, key, value, key_padding_mask=key_padding_mask, need_weights=True,
                      attn_mask=attn_mask, average_attn_weights=average)

    output, attn_weights = forward(True)
    _, attn_weights_per_head = forward(False)
    (output * grad_output.double()).sum().backward()

    expected = {
        "output": output,
        "attn_weights": attn_weights,
        "attn_weights_per_head": attn_weights_per_head,
    }
    expected.update({f"grad.{name}": x.grad for name, x in leaves.items()})
    expected.update({f"grad.{name}": p.grad for name, p in module.named_parameters()})
    for name, tensor in expected.items():
        assert not torch.isnan(tensor).any(), f"{case.name}: NaN in {name}"
    assert torch.allclose(attn_weights_per_head.mean(dim=-3), attn_weights, rtol=0, atol=1e-15)
    return {name: t.detach().numpy() for name, t in expected.items()}


def build_case(case):
    """All tensors of one golden file by name, as numpy arrays in their stored dtype."""
    gen = case_generator(case)
    module = make_module(case, gen)
    params = {name: p.detach().numpy().copy() for name, p in module.named_parameters()}
    inputs = make_inputs(case, gen)
    masks = make_masks(case, gen)
    grad_output = randn32(gen, inputs["query"].shape)
    expected = run_pytorch(case, module, inputs, masks, grad_output)
    tensors = dict(params)
    tensors.update({name: x.numpy() for name, x in inputs.items()})
    tensors.update({name: m.numpy() for name, m in masks.items()})
    tensors["grad_output"] = grad_output.numpy()
    tensors.update(expected)
    return tensors


def case_metadata(case):
    return {
        "num_heads": str(case.num_heads),
        "add_zero_attn": str(case.add_zero_attn).lower(),
        "causal": str(case.causal).lower(),
        "description": case.description,
    }


# ---------------------------------------------------------------------------
# safetensors writer and an independent reader
# ---------------------------------------------------------------------------

DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
          "I64": np.dtype("<i8"), "BOOL": np.dtype("u1"), "U8": np.dtype("u1")}


class BF16:
    """A bfloat16 tensor for write_safetensors: the bits of array rounded to nearest, ties to even."""

    def __init__(self, array):
        bits = np.ascontiguousarray(array, dtype="<f4").view("<u4").astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        self.bits = rounded.astype("<u2")
        self.shape = self.bits.shape

    def values(self):
        """The float32 values the bits stand for."""
        return (self.bits.astype("<u4") << 16).view("<f4")


def safetensors_dtype(array):
    if isinstance(array, BF16):
        return "BF16"
    return {np.float32: "F32", np.float64: "F64", np.float16: "F16", np.int64: "I64", np.bool_: "BOOL",
            np.uint8: "U8"}[array.dtype.type]


def write_safetensors(path, tensors, metadata):
    """Header entries and data in sorted-name order, data contiguous from offset 0."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        array = tensors[name]
        dtype = safetensors_dtype(array)
        if isinstance(array, BF16):
            array = array.bits
        data = np.ascontiguousarray(array, dtype=DTYPES[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    header["__metadata__"] = metadata
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        f.write(b"".join(chunks))


def read_safetensors(path):
    """Parse and validate a file; returns ({name: array}, metadata). Bool and U8 read as uint8."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob)
    assert n % 8 == 0 and 8 + n <= len(blob), f"{path}: bad header length {n}"
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    metadata = header.pop("__metadata__")
    assert all(isinstance(v, str) for v in metadata.values())
    tensors, offset = {}, 0
    for name in sorted(header):
        entry = header[name]
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        assert begin == offset, f"{path}: {name} starts at {begin}, expected {offset}"
        assert end - begin == math.prod(entry["shape"]) * dtype.itemsize, f"{path}: {name} size"
        array = np.frombuffer(data[begin:end], dtype=dtype).reshape(entry["shape"])
        if entry["dtype"] == "BOOL":
            assert set(np.unique(array)) <= {0, 1}, f"{path}: {name} is not 0/1"
        tensors[name] = array
        offset = end
    assert offset == len(data), f"{path}: {len(data) - offset} trailing bytes"
    return tensors, metadata


# ---------------------------------------------------------------------------
# Verification: expected names/shapes and an independent numpy forward pass
# ---------------------------------------------------------------------------

def expected_layout(case):
    """{name: (dtype, shape)} that the file of this case must hold, derived from the spec alone."""
    E, H, tq, tk, tk_ext = case.embed_dim, case.num_heads, case.tq, case.src_len, case.extended_src_len
    lead = (case.batch,) if case.batch is not None else ()
    params = {"out_proj.weight": (E, E)}
    if (case.key_dim, case.value_dim) != (E, E):
        params.update({"q_proj_weight": (E, E), "k_proj_weight": (E, case.key_dim),
                       "v_proj_weight": (E, case.value_dim)})
    else:
        params["in_proj_weight"] = (3 * E, E)
    if case.bias:
        params.update({"in_proj_bias": (3 * E,), "out_proj.bias": (E,)})
    if case.add_bias_kv:
        params.update({"bias_k": (1, 1, E), "bias_v": (1, 1, E)})
    inputs = {"query": lead + (tq, E)}
    if case.cross:
        inputs.update({"key": lead + (tk, case.key_dim), "value": lead + (tk, case.value_dim)})
    layout = {name: ("F32", shape) for name, shape in {**params, **inputs}.items()}
    layout["grad_output"] = ("F32", lead + (tq, E))
    if case.key_padding:
        layout["key_padding_mask"] = ({"bool": "BOOL", "u8": "U8"}[case.key_padding], lead + (tk,))
    if case.attn_mask:
        kind, rank = case.attn_mask.split("_")
        bh = ((case.batch or 1) * H,) if rank == "3d" else ()
        layout["attn_mask"] = ("BOOL" if kind == "bool" else "F32", bh + (tq, tk))
    layout["output"] = ("F64", lead + (tq, E))
    layout["attn_weights"] = ("F64", lead + (tq, tk_ext))
    layout["attn_weights_per_head"] = ("F64", lead + (H, tq, tk_ext))
    for name, shape in {**params, **inputs}.items():
        layout[f"grad.{name}"] = ("F64", shape)
    return layout


def check_layout(case, path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__")
    actual = {name: (e["dtype"], tuple(e["shape"])) for name, e in header.items()}
    expected = expected_layout(case)
    assert actual == expected, f"{case.name}: layout {actual} != {expected}"


def numpy_attention(t, meta):
    """MultiheadAttention forward in numpy float64 from the stored tensors.

    Returns (output, averaged weights, per-head weights, max |finite scaled score|)
    with a leading batch dimension even for unbatched files.
    """
    H = int(meta["num_heads"])
    f64 = {name: a.astype(np.float64) for name, a in t.items()}
    unbatched = f64["query"].ndim == 2
    add_batch = (lambda a: a[None]) if unbatched else (lambda a: a)
    x_q = add_batch(f64["query"])
    x_k = add_batch(f64.get("key", f64["query"]))
    x_v = add_batch(f64.get("value", f64["query"]))
    E = x_q.shape[-1]
    d = E // H
    if "in_proj_weight" in f64:
        w_q, w_k, w_v = np.split(f64["in_proj_weight"], 3)
    else:
        w_q, w_k, w_v = f64["q_proj_weight"], f64["k_proj_weight"], f64["v_proj_weight"]
    b_q, b_k, b_v = np.split(f64.get("in_proj_bias", np.zeros(3 * E)), 3)
    q, k, v = x_q @ w_q.T + b_q, x_k @ w_k.T + b_k, x_v @ w_v.T + b_v
    B, tq, tk = q.shape[0], q.shape[1], k.shape[1]

    blocked = np.zeros((B, H, tq, tk), dtype=bool)
    additive = np.zeros((B, H, tq, tk))
    if meta["causal"] == "true":
        blocked |= np.triu(np.ones((tq, tk), dtype=bool), k=1)
    if "key_padding_mask" in t:
        blocked |= add_batch(t["key_padding_mask"]).astype(bool)[:, None, None, :]
    if "attn_mask" in t:
        mask = t["attn_mask"]
        if mask.ndim == 3:
            mask = mask.reshape(B, H, tq, tk)
        if mask.dtype == np.float32:
            blocked |= np.isneginf(mask)
            additive += np.where(np.isneginf(mask), 0.0, mask)
        else:
            blocked |= mask.astype(bool)

    # Extra keys (bias_k, then the zero key) are appended last and always attendable.
    append = lambda a, extra: np.concatenate([a, extra], axis=-2)
    pad_key = lambda m: np.pad(m, ((0, 0), (0, 0), (0, 0), (0, 1)))
    if "bias_k" in f64:
        k = append(k, np.broadcast_to(f64["bias_k"], (B, 1, E)))
        v = append(v, np.broadcast_to(f64["bias_v"], (B, 1, E)))
        blocked, additive = pad_key(blocked), pad_key(additive)
    split = lambda a: a.reshape(B, a.shape[1], H, d).transpose(0, 2, 1, 3)
    q, k, v = split(q), split(k), split(v)
    if meta["add_zero_attn"] == "true":
        zeros = np.zeros((B, H, 1, d))
        k, v = append(k, zeros), append(v, zeros)
        blocked, additive = pad_key(blocked), pad_key(additive)

    raw = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    scores = np.where(blocked, -np.inf, raw + additive)
    assert not blocked.all(axis=-1).any(), "fully masked query row"
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    heads = (weights @ v).transpose(0, 2, 1, 3).reshape(B, tq, E)
    output = heads @ f64["out_proj.weight"].T + f64.get("out_proj.bias", np.zeros(E))
    return output, weights.mean(axis=1), weights, np.abs(raw[~blocked]).max()


def verify_case(case, path):
    """Re-read a file and compare its expected tensors with the numpy forward pass."""
    check_layout(case, path)
    tensors, metadata = read_safetensors(path)
    assert metadata == case_metadata(case), f"{case.name}: metadata {metadata}"
    output, weights, per_head, max_score = numpy_attention(tensors, metadata)
    lead = (lambda a: a) if case.batch is not None else (lambda a: a[0])
    diff = max(np.abs(lead(output) - tensors["output"]).max(),
               np.abs(lead(weights) - tensors["attn_weights"]).max(),
               np.abs(lead(per_head) - tensors["attn_weights_per_head"]).max())
    assert diff < NUMPY_TOLERANCE, f"{case.name}: numpy differs from PyTorch by {diff}"
    return {"bytes": os.path.getsize(path), "max_score": max_score, "numpy_diff": diff,
            "shapes": {name: a.shape for name, a in tensors.items()}}


# ---------------------------------------------------------------------------
# Summary and README
# ---------------------------------------------------------------------------

def print_summary(results):
    print(f"{'case':34} {'bytes':>8} {'max|score|':>11} {'numpy diff':>11}")
    for case in CASES:
        r = results[case.name]
        print(f"{case.name:34} {r['bytes']:8d} {r['max_score']:11.3f} {r['numpy_diff']:11.2e}")
    total = sum(r["bytes"] for r in results.values())
    print(f"{'total':34} {total:8d}")


def shape_str(shape):
    return "[" + ",".join(str(s) for s in shape) + "]"


def readme_row(case, result):
    shapes = result["shapes"]
    kv = "= query" if not case.cross else f"{shape_str(shapes['key'])} / {shape_str(shapes['value'])}"
    masks = [f"key_padding_mask {'U8' if case.key_padding == 'u8' else 'BOOL'} "
             f"{shape_str(shapes['key_padding_mask'])}"] if case.key_padding else []
    if case.attn_mask:
        kind = "BOOL" if case.attn_mask.startswith("bool") else "F32"
        masks.append(f"attn_mask {kind} {shape_str(shapes['attn_mask'])}")
    if case.causal:
        masks.append("causal")
    options = [flag for flag, on in (("bias=False", not case.bias), ("add_bias_kv", case.add_bias_kv),
                                     ("add_zero_attn", case.add_zero_attn)) if on]
    return (f"| `{case.name}` | {shape_str(shapes['query'])} | {kv} | {case.num_heads} | "
            f"{case.extended_src_len} | {', '.join(masks) or '-'} | {', '.join(options) or '-'} | "
            f"{case.description} |")


README_HEADER = """\
# MultiheadAttention golden files

Generated by `testdata/gen_golden.py` with PyTorch 1.13 (`torch.nn.MultiheadAttention`).
Regenerate from the repository root with

    /usr/bin/python3 testdata/gen_golden.py

The script is deterministic (per-case seeds from the case name, single-threaded torch):
running it twice gives byte-identical files. It also re-reads every file, checks its
layout and recomputes the forward pass with plain numpy float64 (max difference
to PyTorch below 1e-14). This README is regenerated by the script too.

## File contents (`<case>.safetensors`)

- Parameters, F32, with the state-dict names of `nn.MultiheadAttention`: `in_proj_weight` [3E,E]
  (or `q_proj_weight` [E,E], `k_proj_weight` [E,kdim], `v_proj_weight` [E,vdim] when kdim/vdim
  differ from E), `in_proj_bias` [3E] and `out_proj.bias` [E] unless bias=False,
  `out_proj.weight` [E,E], `bias_k` and `bias_v` [1,1,E] with add_bias_kv. All parameters,
  biases included, are random (std 0.5/sqrt(fan_in)).
- Inputs, F32: `query` [B,Tq,E] ([Tq,E] unbatched); `key` [B,Tk,kdim] and `value` [B,Tk,vdim]
  only for cross-attention (a file without them is self-attention: key = value = query);
  optional `key_padding_mask` [B,Tk] ([Tk] unbatched; BOOL or U8, true/1 = padding);
  optional `attn_mask` [Tq,Tk] or [B*H,Tq,Tk] (index b*H+h), BOOL (true = may not attend)
  or F32 (added to the scaled scores, may hold -inf); `grad_output`, shaped like `output`.
- Expected results, F64, computed in float64 (eval, dropout 0, batch_first=True): `output`
  [B,Tq,E]; `attn_weights` [B,Tq,Tk'] (averaged over heads); `attn_weights_per_head`
  [B,H,Tq,Tk']; unbatched files drop the B dimension. Tk' = Tk, +1 with add_bias_kv,
  +1 with add_zero_attn (the extra keys come last: bias key first, then the zero key;
  masks are padded with "attend" for them).
- Gradients, F64, of `sum(output * grad_output)`: `grad.query`, `grad.key`, `grad.value`
  (cross-attention only; for self-attention `grad.query` is the total gradient through
  query, key and value) and `grad.<parameter name>` for every parameter.
- `__metadata__`: `num_heads`, `add_zero_attn` and `causal` ("true"/"false"), `description`.
  Causal masks are not stored: with causal=true query i attends keys j <= i (top-left
  aligned, also when Tq != Tk); the reference passed triu(ones(Tq,Tk), 1) as a bool
  attn_mask to PyTorch.

No query row is fully masked in any file (key 0 is never padded and is unmasked again
wherever the masks together would hide a whole row).

## PyTorch 1.13 behaviour reproduced here

- Scores are `(q / sqrt(head_dim)) @ k^T + mask`; `attn_weights` is the per-head weights
  summed over heads and divided by H.
- `bias_k`/`bias_v` are appended after the in-projection (they are not projected), as the
  last key of every batch; the zero key/value of add_zero_attn is appended per head after
  that, so its score is exactly 0. Masks are padded with false / 0.0 for both extra keys,
  so they can never be masked.
- Bool masks become -inf; a bool key_padding_mask is OR-ed into a bool attn_mask or
  written as -inf into a float attn_mask, so bool and float masks may be mixed.
- `nn.MultiheadAttention` in 1.13 rejects a uint8 key_padding_mask ("only bool and
  floating types of key_padding_mask are supported"); `key_padding_u8` stores U8 0/1 and
  its results come from the same mask as bool. A uint8 attn_mask is accepted with a
  deprecation warning and treated as bool.
- Unbatched input takes a key_padding_mask of shape [Tk] only ([1,Tk] is rejected) and a
  3-D attn_mask only as [H,Tq,Tk].
- A float key_padding_mask (not used here) is inconsistent in 1.13: added like a float
  mask when alone, OR-ed as nonzero = padding into a bool attn_mask, and silently ignored
  with a float attn_mask (masked_fill with a float mask is a no-op there).
- A fully masked row gives NaN in PyTorch; no file contains one.

## Cases

| case | query | key / value | H | Tk' | masks | options | covers |
|---|---|---|---|---|---|---|---|
"""


def write_readme(results):
    rows = "\n".join(readme_row(case, results[case.name]) for case in CASES)
    total = sum(r["bytes"] for r in results.values())
    with open(os.path.join(GOLDEN_DIR, "README.md"), "w") as f:
        f.write(README_HEADER + rows + f"\n\n{len(CASES)} files, {total} bytes in total.\n")


def main():
    torch.set_num_threads(1)
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    for stale in os.listdir(GOLDEN_DIR):
        if stale.endswith(".safetensors"):
            os.remove(os.path.join(GOLDEN_DIR, stale))
    results = {}
    for case in CASES:
        path = os.path.join(GOLDEN_DIR, f"{case.name}.safetensors")
        write_safetensors(path, build_case(case), case_metadata(case))
        results[case.name] = verify_case(case, path)
    print_summary(results)
    write_readme(results)


if __name__ == "__main__":
    main()
