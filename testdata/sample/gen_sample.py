#!/usr/bin/python3
"""Writes the README's sample files for `mha run`, in testdata/sample/:

    attn.safetensors      the state dict of torch.nn.MultiheadAttention(16, 4, batch_first=True)
    in.safetensors        query [2, 5, 16] (self-attention)
    expected.safetensors  what PyTorch gives: output [2, 5, 16], attn_weights [2, 5, 5]
                          (averaged over heads, PyTorch's default)

Run with Debian's python3-torch (1.13): /usr/bin/python3 testdata/sample/gen_sample.py
A user with the `safetensors` package saves their own layer the same way with
safetensors.torch.save_file; this script uses the golden files' writer so that it needs only torch.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from gen_golden import write_safetensors  # noqa: E402  (one writer for every golden file)

torch.manual_seed(0)
layer = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
query = torch.randn(2, 5, 16)
with torch.no_grad():
    output, weights = layer(query, query, query)


def arrays(tensors):
    return {name: t.detach().numpy() for name, t in tensors.items()}


meta = {"generator": "testdata/sample/gen_sample.py", "torch": torch.__version__}
write_safetensors(os.path.join(HERE, "attn.safetensors"), arrays(layer.state_dict()), meta)
write_safetensors(os.path.join(HERE, "in.safetensors"), arrays({"query": query}), meta)
write_safetensors(os.path.join(HERE, "expected.safetensors"), arrays({"output": output, "attn_weights": weights}), meta)
