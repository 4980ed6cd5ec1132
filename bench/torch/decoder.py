"""The Llama-architecture decoder of the Python examples (graph_decode.py,
serve_torch.py, and through torch_jobs.py colocate_torch.py): its shape,
random weights, RoPE tables and the pieces of a step they share, and the
decode step on static inputs that graph_decode.py captures and
torch_jobs.py's ``llama3`` runs.

Nothing is downloaded: the weights are random bf16 from one seeded generator
on the device, drawn in a fixed order (the embedding, then per layer
attn_norm, wqkv, wo, mlp_norm, wgu, wdown, then the final norm), so a seed
gives the same model in every example. The architecture: RMSNorm,
grouped-query attention (``heads`` query heads, ``kv_heads`` KV heads of
``head_dim``), RoPE (theta 500000), a SwiGLU MLP of ``intermediate``, a
vocabulary of ``vocab`` with the embedding tied to the LM head, bf16.

torch is passed in (the examples import it only once they know it and a GPU
are there), so this module imports without it. Imported as a sibling module,
like bench_common.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Dict, Tuple

LLAMA_ROPE_THETA = 500000.0


def add_shape_args(p: argparse.ArgumentParser) -> None:
    """The decoder's shape options, Llama-3.2-1B's by default: --layers,
    --hidden, --heads, --kv-heads, --head-dim, --intermediate, --vocab (the
    Namespace fields Llama reads, with --seed)."""
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=128256)


class RandomBF16:
    """Random bf16 tensors on ``dev`` from one generator seeded with ``seed``:
    the order of the calls fixes the values."""

    def __init__(self, torch: Any, dev: Any, seed: int) -> None:
        self.t, self.dev = torch, dev
        self.gen = torch.Generator(device=dev).manual_seed(seed)

    def w(self, *shape: int, std: float) -> Any:
        """Normal, mean 0 and standard deviation ``std``."""
        return (self.t.randn(*shape, device=self.dev, generator=self.gen) * std).to(self.t.bfloat16)

    def norm(self, n: int) -> Any:
        """A norm's weight: 1 + 0.05 x normal, [n]."""
        return (1.0 + 0.05 * self.t.randn(n, device=self.dev, generator=self.gen)).to(self.t.bfloat16)


def rope_tables(torch: Any, dev: Any, dim: int, positions: int, theta: float) -> Tuple[Any, Any]:
    """(cos, sin) of the rotary embedding over ``dim`` dimensions for
    positions 0 .. positions-1: float32 [positions, dim/2]."""
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, device=dev, dtype=torch.float32) / dim))
    ang = torch.outer(torch.arange(positions, device=dev, dtype=torch.float32), inv)
    return ang.cos(), ang.sin()


class Llama:
    """Shape, weights and RoPE tables of the decoder and the pieces of a step
    (``a``: an argparse.Namespace with layers, hidden, heads, kv_heads,
    head_dim, intermediate, vocab and seed; ``context``: the positions the
    RoPE tables and the attention mask cover).

    After the weights, ``self.rand`` (its generator) goes on drawing: a
    subclass that draws more (a random KV cache, inputs) draws after them.
    """

    def __init__(self, torch: Any, a: argparse.Namespace, dev: Any, context: int) -> None:
        self.t, self.F = torch, torch.nn.functional
        if a.heads % a.kv_heads:
            raise SystemExit("--heads must be a multiple of --kv-heads")
        self.L, self.H, self.KV, self.D = a.layers, a.heads, a.kv_heads, a.head_dim
        self.G = self.H // self.KV
        self.hidden, self.inter, self.vocab, self.C = a.hidden, a.intermediate, a.vocab, context
        self.rand = r = RandomBF16(torch, dev, a.seed)
        hd, q, kv = self.hidden, self.H * self.D, self.KV * self.D
        self.embed = r.w(self.vocab, hd, std=0.02)  # tied with the LM head
        self.layers = [{
            "attn_norm": r.norm(hd), "wqkv": r.w(hd, q + 2 * kv, std=hd ** -0.5),
            "wo": r.w(q, hd, std=q ** -0.5 / math.sqrt(2 * self.L)), "mlp_norm": r.norm(hd),
            "wgu": r.w(hd, 2 * self.inter, std=hd ** -0.5),
            "wdown": r.w(self.inter, hd, std=self.inter ** -0.5 / math.sqrt(2 * self.L)),
        } for _ in range(self.L)]
        self.final_norm = r.norm(hd)
        self.cos, self.sin = rope_tables(torch, dev, self.D, self.C, LLAMA_ROPE_THETA)  # [C, D/2]
        self.ctx_idx = torch.arange(self.C, device=dev)

    def rms(self, x: Any, wt: Any) -> Any:
        xf = x.float()
        return (xf * self.t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * wt

    def rope(self, x: Any, cos: Any, sin: Any) -> Any:
        """x [n, heads, D]; cos, sin [n, 1, D/2] (rope_at's)."""
        xf = x.float()
        x1, x2 = xf[..., : self.D // 2], xf[..., self.D // 2:]
        return self.t.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).to(x.dtype)

    def rope_at(self, pos: Any) -> Tuple[Any, Any]:
        """cos, sin for the positions pos [n], shaped for rope: [n, 1, D/2]."""
        return self.cos[pos][:, None, :], self.sin[pos][:, None, :]

    def qkv(self, x: Any, lw: Dict[str, Any]) -> Tuple[Any, Any, Any]:
        """The attention's q, k, v of x [n, hidden] (attn_norm, then wqkv)."""
        H, KV, D = self.H, self.KV, self.D
        return (self.rms(x, lw["attn_norm"]) @ lw["wqkv"]).split([H * D, KV * D, KV * D], -1)

    def mlp(self, x: Any, lw: Dict[str, Any]) -> Any:
        """x plus the SwiGLU MLP of rms(x)."""
        gate, up = (self.rms(x, lw["mlp_norm"]) @ lw["wgu"]).chunk(2, -1)
        return x + (self.F.silu(gate) * up) @ lw["wdown"]

    def head(self, x: Any) -> Any:
        """Logits [n, vocab] of x [n, hidden]: final norm, tied LM head."""
        return self.rms(x, self.final_norm) @ self.embed.t()


class Decoder(Llama):
    """A decode step of batch ``a.batch`` on static inputs over a KV cache of
    ``a.context`` positions that starts random (a prompt already decoded), so
    every run of ``step()`` is the same computation: it rewrites the same
    entries with the same values. ``a.position``: position of the decoded
    token (None: 3/4 of the context; batch entries get consecutive ones below
    it). graph_decode.py checks and times it; torch_jobs.py's ``llama3``."""

    def __init__(self, torch: Any, a: argparse.Namespace, dev: Any) -> None:
        super().__init__(torch, a, dev, a.context)
        self.B = a.batch
        r = self.rand
        # the KV cache, [layer][batch, kv head, position, head dim], holding a prompt already decoded
        self.k_cache = r.w(self.L, self.B, self.KV, self.C, self.D, std=1.0)
        self.v_cache = r.w(self.L, self.B, self.KV, self.C, self.D, std=1.0)
        self.b_idx = torch.arange(self.B, device=dev)
        # static inputs
        pos = a.position if a.position is not None else (3 * self.C) // 4
        if not self.B <= pos + 1 <= self.C:
            raise SystemExit(f"--position {pos} must lie in [batch-1, context-1]")
        self.tokens = torch.randint(0, self.vocab, (self.B,), device=dev, generator=r.gen)
        self.positions = torch.arange(pos - self.B + 1, pos + 1, device=dev)

    def step(self) -> Any:
        """One decode step on the static inputs: logits [B, vocab] (bf16)."""
        F = self.F
        B, H, KV, G, D = self.B, self.H, self.KV, self.G, self.D
        pos = self.positions
        x = self.embed[self.tokens]  # [B, hidden]
        cos, sin = self.rope_at(pos)
        mask = (self.ctx_idx[None, :] <= pos[:, None])[:, None, None, :]  # [B, 1, 1, C]
        for li, lw in enumerate(self.layers):
            q, k, v = self.qkv(x, lw)
            q = self.rope(q.view(B, H, D), cos, sin)
            k = self.rope(k.view(B, KV, D), cos, sin)
            kc, vc = self.k_cache[li], self.v_cache[li]
            kc[self.b_idx, :, pos] = k  # the new entries at each sequence's position
            vc[self.b_idx, :, pos] = v.view(B, KV, D)
            # grouped-query attention: the G query heads of a KV head are its G "query rows"
            o = F.scaled_dot_product_attention(q.view(B, KV, G, D), kc, vc, attn_mask=mask)
            x = self.mlp(x + o.reshape(B, H * D) @ lw["wo"], lw)
        return self.head(x)
