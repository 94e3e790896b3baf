"""Training speed of nn's PyTorch twin, for comparison with `mha train`.

    /usr/bin/python3 nn/testdata/train_speed.py models/induction.safetensors [--batch 32] [--steps 300]

Reads the model config from the checkpoint's metadata (as `mha train` wrote it), builds the same
model with torch_model.py, and times full training steps as `mha train` runs them: forward,
cross-entropy, backward, gradient clipping to norm 1 and an AdamW step, on batches of random
tokens of the model's vocabulary and length, with torch's threads set to --threads. Prints the
median tokens/s over --repeats timed blocks of --steps steps after a warm-up.
"""

import argparse
import json
import os
import struct
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402


def read_config(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return torch_model.Config.from_json(header["__metadata__"]["config"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = read_config(args.checkpoint)
    model = torch_model.Model(cfg)
    model.train()
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    b, t = args.batch, cfg.seq_len
    tokens = torch.randint(0, cfg.vocab, (b, t))
    targets = torch.randint(0, cfg.vocab, (b, t))

    def step():
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.reshape(b * t, cfg.vocab), targets.reshape(-1))
        opt.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    for _ in range(max(10, args.steps // 5)):
        step()
    rates = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        rates.append(args.steps * b * t / (time.perf_counter() - start))
    rates.sort()
    print(json.dumps({"impl": "torch", "config": json.loads(cfg.to_json()), "batch": b, "threads": args.threads,
                      "tokens_per_s": round(rates[len(rates) // 2]), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
