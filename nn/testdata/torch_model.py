"""The PyTorch twin of package nn's Model: same modules, same parameter names and layouts.

    import torch_model
    model = torch_model.Model(torch_model.Config.from_json(json_text))
    logits = model(tokens)                      # tokens [B, T] int64 -> [B, T, vocab]
    logits = model(tokens, token_types)         # with type_vocab > 0: types [B, T] int64
    loss, correct, counted = torch_model.loss(logits, targets, scored)

dict(model.named_parameters()) has exactly the tensors of a Go checkpoint (nn.Save), under the
same names, so the two load each other's weights (so does model.state_dict(), but for a tied
head, tie_embeddings, it also lists head.weight, the same tensor as tok_emb.weight). Attention
dropout uses PyTorch's generator, so masks differ from Go's; everything else matches to float32
rounding.

The options of Hugging Face's GPT-2, BERT and Llama families (RMSNorm, the norms' eps, GELU's
tanh approximation, SwiGLU, Linears without bias, a tied head, token type embeddings and an
embedding norm, no positions) follow transformers' modules: RMSNorm is LlamaRMSNorm, without
its cast to float32 (these runs are float32 or float64 throughout), and SwiGLU is LlamaMLP.
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
    positions: str = "learned"  # "learned", "sinusoidal" or "none"
    attn_only: bool = False
    dropout: float = 0.0
    seed: int = 0
    # The Hugging Face options, left out of the JSON at their defaults (as Go's omitempty does).
    norm_kind: str = ""  # "" or "layernorm", "rmsnorm"
    norm_eps: float = 0.0  # 0: 1e-5
    activation: str = ""  # "" or "gelu", "gelu_new", "gelu_pytorch_tanh", "swiglu"
    no_mlp_bias: bool = False
    no_head_bias: bool = False
    tie_embeddings: bool = False
    type_vocab: int = 0
    emb_norm: bool = False

    OPTIONAL = ("norm_kind", "norm_eps", "activation", "no_mlp_bias", "no_head_bias",
                "tie_embeddings", "type_vocab", "emb_norm")

    @classmethod
    def from_json(cls, text):
        return cls(**json.loads(text))

    def to_json(self):
        fields = dataclasses.asdict(self)
        for k in self.OPTIONAL:
            if not fields[k]:
                del fields[k]
        return json.dumps(fields, separators=(",", ":"))

    def hidden(self):
        return self.ffn or 4 * self.d_model

    def eps(self):
        return self.norm_eps or 1e-5

    def new_norm(self):
        """A new normalisation layer of the configured kind over d_model."""
        if self.norm_kind == "rmsnorm":
            return RMSNorm(self.d_model, self.eps())
        return nn.LayerNorm(self.d_model, eps=self.eps())


def sinusoid(n, d):
    """Vaswani et al.'s table [n, d]: sin at even columns, cos at odd, in float64."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    col = torch.arange(d)
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), (col - col % 2).double() / d)
    return torch.where(col % 2 == 0, torch.sin(angle), torch.cos(angle))


class RMSNorm(nn.Module):
    """transformers' LlamaRMSNorm: weight * (x * rsqrt(mean(x^2) + eps)), in the input's dtype."""

    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


class FFN(nn.Module):
    """fc2(GELU(fc1(x))), GELU exact or, for gelu_new and gelu_pytorch_tanh, tanh."""

    def __init__(self, cfg):
        super().__init__()
        bias = not cfg.no_mlp_bias
        self.fc1 = nn.Linear(cfg.d_model, cfg.hidden(), bias=bias)
        self.fc2 = nn.Linear(cfg.hidden(), cfg.d_model, bias=bias)
        self.approximate = "tanh" if cfg.activation in ("gelu_new", "gelu_pytorch_tanh") else "none"

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class SwiGLU(nn.Module):
    """transformers' LlamaMLP: down_proj(silu(gate_proj(x)) * up_proj(x))."""

    def __init__(self, cfg):
        super().__init__()
        bias = not cfg.no_mlp_bias
        self.gate_proj = nn.Linear(cfg.d_model, cfg.hidden(), bias=bias)
        self.up_proj = nn.Linear(cfg.d_model, cfg.hidden(), bias=bias)
        self.down_proj = nn.Linear(cfg.hidden(), cfg.d_model, bias=bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.d_model
        self.pre = cfg.norm == "pre"
        self.ln1 = cfg.new_norm()
        self.attn = nn.MultiheadAttention(d, cfg.heads, dropout=cfg.dropout, batch_first=True)
        self.ln2 = None if cfg.attn_only else cfg.new_norm()
        if cfg.attn_only:
            self.ffn = None
        elif cfg.activation == "swiglu":
            self.ffn = SwiGLU(cfg)
        else:
            self.ffn = FFN(cfg)

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
        self.pos_emb = None
        if cfg.positions == "learned":
            self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        elif cfg.positions == "sinusoidal":
            self.register_buffer("pe", sinusoid(cfg.seq_len, cfg.d_model).float(), persistent=False)
        self.type_emb = nn.Embedding(cfg.type_vocab, cfg.d_model) if cfg.type_vocab > 0 else None
        self.emb_ln = cfg.new_norm() if cfg.emb_norm else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = cfg.new_norm() if cfg.norm == "pre" else None
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=not cfg.no_head_bias)
        if cfg.tie_embeddings:
            self.head.weight = self.tok_emb.weight

    def positions(self, t):
        if self.pos_emb is not None:
            return self.pos_emb.weight[:t]
        if self.cfg.positions == "none":
            return 0
        return self.pe[:t].to(self.tok_emb.weight.dtype)

    def forward(self, tokens, token_types=None):
        t = tokens.shape[1]
        x = self.tok_emb(tokens) + self.positions(t)
        if self.type_emb is not None:
            if token_types is None:
                token_types = torch.zeros_like(tokens)
            x = x + self.type_emb(token_types)
        if self.emb_ln is not None:
            x = self.emb_ln(x)
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
