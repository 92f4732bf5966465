"""A plain PyTorch Llama (float32, no KV cache), laid out as Hugging Face's
LlamaForCausalLM so its parameter names are the checkpoint's: the model a
PyTorch user would patch with cortiq.torch.patch."""

import json
import math
import pathlib

import torch
from torch import nn

import cortiq


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        bias = c.get("attention_bias", False)
        d = c["hidden_size"]
        self.q_proj = nn.Linear(d, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, d, bias=bias)

    def forward(self, x, cos, sin):
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.heads, self.head_dim).transpose(0, 1)
        k = self.k_proj(x).view(T, self.kv_heads, self.head_dim).transpose(0, 1)
        v = self.v_proj(x).view(T, self.kv_heads, self.head_dim).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
        scores = q @ k.transpose(1, 2) / math.sqrt(self.head_dim)
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        p = scores.masked_fill(causal, float("-inf")).softmax(-1)
        return self.o_proj((p @ v).transpose(0, 1).reshape(T, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, f, bias = c["hidden_size"], c["intermediate_size"], c.get("mlp_bias", False)
        self.gate_proj = nn.Linear(d, f, bias=bias)
        self.up_proj = nn.Linear(d, f, bias=bias)
        self.down_proj = nn.Linear(f, d, bias=bias)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = Decoder(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, ids):
        attn = self.model.layers[0].self_attn
        D = attn.head_dim
        theta = self.config.get("rope_theta", 10000.0)
        inv_freq = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
        freqs = torch.arange(len(ids), dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        x = self.model.embed_tokens(torch.as_tensor(ids, dtype=torch.long))
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))


def load_llama(folder):
    """The Llama of a Hugging Face folder, its weights read by cortiq.read_tensors."""
    folder = pathlib.Path(folder)
    c = json.loads((folder / "config.json").read_text())
    model = Llama(c).eval()
    state = {k: torch.from_numpy(v) for k, v in cortiq.read_tensors(folder).items()}
    if c.get("tie_word_embeddings", False):
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    model.load_state_dict(state, strict=True)
    return model
