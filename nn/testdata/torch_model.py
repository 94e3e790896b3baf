"""The PyTorch twin of package nn's Model: same modules, same parameter names and layouts.

    import torch_model
    model = torch_model.Model(torch_model.Config.from_json(json_text))
    logits = model(tokens)                      # tokens [B, T] int64 -> [B, T, vocab]
    loss, correct, counted = torch_model.loss(logits, targets, scored)

model.state_dict() has exactly the tensors of a Go checkpoint (nn.Save), under the same names,
so the two load each other's weights. Attention dropout uses PyTorch's generator, so masks
differ from Go's; everything else matches to float32 rounding.
"""

import dataclasses
import json

import torch
from torch import nn
from torch.nn import functional as F


@dataclasses.dataclass
class Config:
    """nn.Config, with the same JSON field names."""

    vocab: int
    seq_len: int
    d_model: int
    heads: int
    layers: int
    ffn: int = 0  # 0: 4 * d_model, unless attn_only
    norm: str = "pre"  # "pre" or "post"
    positions: str = "learned"  # "learned" or "sinusoidal"
    attn_only: bool = False
    dropout: float = 0.0
    seed: int = 0

    @classmethod
    def from_json(cls, text):
        return cls(**json.loads(text))

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    def hidden(self):
        return self.ffn or 4 * self.d_model


def sinusoid(n, d):
    """Vaswani et al.'s table [n, d]: sin at even columns, cos at odd, in float64."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    col = torch.arange(d)
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), (col - col % 2).double() / d)
    return torch.where(col % 2 == 0, torch.sin(angle), torch.cos(angle))


class FFN(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.d_model
        self.pre = cfg.norm == "pre"
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, cfg.heads, dropout=cfg.dropout, batch_first=True)
        self.ln2 = None if cfg.attn_only else nn.LayerNorm(d)
        self.ffn = None if cfg.attn_only else FFN(d, cfg.hidden())

    def attend(self, x, mask):
        return self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]

    def forward(self, x, mask):
        if self.pre:
            x = x + self.attend(self.ln1(x), mask)
            if self.ffn is not None:
                x = x + self.ffn(self.ln2(x))
            return x
        x = self.ln1(x + self.attend(x, mask))
        if self.ffn is not None:
            x = self.ln2(x + self.ffn(x))
        return x


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab, cfg.d_model)
        if cfg.positions == "learned":
            self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        else:
            self.pos_emb = None
            self.register_buffer("pe", sinusoid(cfg.seq_len, cfg.d_model).float(), persistent=False)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else None
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def positions(self, t):
        if self.pos_emb is not None:
            return self.pos_emb.weight[:t]
        return self.pe[:t].to(self.head.weight.dtype)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.tok_emb(tokens) + self.positions(t)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=tokens.device), 1)
        for block in self.blocks:
            x = block(x, mask)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return self.head(x)


def loss(logits, targets, scored=None):
    """Mean cross-entropy over the scored positions; also (argmax == target) count and the count."""
    v = logits.shape[-1]
    flat, tgt = logits.reshape(-1, v), targets.reshape(-1)
    if scored is not None:
        keep = scored.reshape(-1)
        flat, tgt = flat[keep], tgt[keep]
    value = F.cross_entropy(flat, tgt)
    correct = int((flat.argmax(-1) == tgt).sum())
    return value, correct, int(tgt.numel())


def num_params(model):
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    model = Model(Config(vocab=11, seq_len=7, d_model=8, heads=2, layers=2))
    for name, p in model.named_parameters():
        print(name, list(p.shape))
    print(num_params(model), "parameters")
