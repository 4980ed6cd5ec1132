"""The PyTorch workloads of pairs_torch.py and colocate_torch.py: training
steps of the models of the paper's Tables 1 and 2, and decode steps of a
Llama-3-architecture and a GPT-J-architecture model, every one capturable as
a detshare graph (VCtx.graph) with static inputs.

Everything is built from random weights and random data on the GPU (nothing
is downloaded). Training jobs are :class:`TrainJob`: ``step()`` runs one
training step (zero the gradients in place, forward, loss, backward,
optimizer step) on static tensors, enqueues only on the current stream, never
synchronizes and uses no CUDA random numbers (dropout is 0 in every model:
torch's generator refuses captures it did not begin), so the same function is
the eager step and the captured one. ``step()`` returns the loss tensor.

Models (``TRAIN_JOBS``; batch sizes are parameters, defaults in
``DEFAULT_BATCH``, chosen so that two jobs fit one 80 GB GPU with room):

- ``resnet50``, ``resnet101``: torchvision (weights=None), 224x224 images,
  1000 classes, bf16 autocast, SGD momentum 0.9, channels-last.
- ``bert_large``: transformers BertForMaskedLM (hidden 1024, 24 layers, 16
  heads, MLP 4096, vocab 30522), sequence 128, 15% of positions labelled,
  bf16 autocast, AdamW (capturable).
- ``lstm``: a 2-layer LSTM language model with the defaults of PyTorch's
  word_language_model example (embedding and hidden 200, tied decoder,
  Wikitext-2's vocabulary of 33278, 35 steps, batch 20, SGD lr 20 with
  gradient clipping 0.25), fp32; torch's
  own LSTM kernels (captured on a green context's stream, cuDNN's RNN path
  recorded a kernel node of another context, which the library refuses).
- ``deepfm``: DeepFM (Guo et al., IJCAI'17) of this file's own: 13 dense and
  26 sparse fields (one table of 26 x 40000 rows of 16, looked up with
  index_select so that the backward is an index_add and needs no host sync),
  first-order and FM second-order terms, a 400-400-400 MLP, AdamW
  (capturable).
- ``lora_llama``: a small Llama-architecture model (transformers LlamaConfig:
  hidden 1024, 12 layers, 16 heads, 4 KV heads, MLP 4096, vocab 32000), bf16
  base weights frozen, peft LoRA r 16 on q/k/v/o projections, sequence 256,
  AdamW (capturable) over the adapters.

Decoders (``DECODERS``): ``llama3`` (Llama-3-8B shape: hidden 4096, 32
layers, 32/8 heads, MLP 14336, vocab 128256; decoder.Decoder, graph_decode.py's) and
``gptj`` (GPT-J-6B shape: hidden 4096, 28 layers, 16 heads of 256, rotary on
the first 64 dimensions of each head, parallel attention and MLP, MLP 16384
GELU, LayerNorm, vocab 50400), bf16, one decode step of a batch over a
preallocated KV cache, returning logits; ``layers`` can be reduced.

Threads: a job is built, warmed and captured on one thread (its vCtx's owner);
nothing here is shared between jobs.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import time
import queue
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from decoder import Decoder, RandomBF16, rope_tables

# Images or sequences per step, per job, so that two jobs of the same model fit
# one 80 GB GPU (measured peak on an H100 is in the result files).
DEFAULT_BATCH: Dict[str, int] = {
    "resnet50": 64,
    "resnet101": 48,
    "bert_large": 16,
    "lstm": 20,
    "deepfm": 4096,
    "lora_llama": 8,
    "tiny_kernels": 1000,
}


@dataclass
class TrainJob:
    """One training job: its model, static inputs and step.

    Attributes:
        name: the model's key in TRAIN_JOBS.
        batch: samples per step.
        unit: what ``batch`` counts ("images", "sequences", "samples").
        params: parameters (trainable and frozen).
        trainable: trainable parameters.
        desc: model, data, precision and optimizer in words (for the JSON).
        step: one training step, ``step() -> loss`` (a 0-d tensor).
    """

    name: str
    batch: int
    unit: str
    params: int
    trainable: int
    desc: Dict[str, Any]
    step: Callable[[], Any]
    keep: list = field(default_factory=list)  # model, optimizer, inputs


def _count(model: Any) -> tuple:
    ps = list(model.parameters())
    return sum(p.numel() for p in ps), sum(p.numel() for p in ps if p.requires_grad)


def _vision(torch: Any, dev: Any, batch: int, seed: int, depth: int) -> TrainJob:
    import torchvision

    g = torch.Generator(device=dev).manual_seed(seed)
    torch.manual_seed(seed)
    ctor = torchvision.models.resnet50 if depth == 50 else torchvision.models.resnet101
    model = ctor(weights=None).to(dev).to(memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, 224, 224, device=dev, generator=g).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=dev, generator=g)

    def step() -> Any:
        opt.zero_grad(set_to_none=False)
        # cache_enabled=False: autocast's weight-cast cache must not outlive a capture
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            loss = loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        return loss.detach()

    n, t = _count(model)
    return TrainJob(f"resnet{depth}", batch, "images", n, t,
                    {"model": f"torchvision resnet{depth} (weights=None), channels-last", "input": "224x224x3",
                     "precision": "bf16 autocast", "optimizer": "SGD lr 0.01 momentum 0.9"},
                    step, [model, opt, images, labels])


def _bert(torch: Any, dev: Any, batch: int, seed: int, seq: int = 128) -> TrainJob:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    g = torch.Generator(device=dev).manual_seed(seed)
    cfg = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=512)
    with torch.device(dev):
        model = BertForMaskedLM(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev, generator=g)
    labels = torch.where(torch.rand(batch, seq, device=dev, generator=g) < 0.15, ids, torch.full_like(ids, -100))

    def step() -> Any:
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        return loss.detach()

    n, t = _count(model)
    return TrainJob("bert_large", batch, "sequences", n, t,
                    {"model": "transformers BertForMaskedLM, BERT-Large shape (1024 hidden, 24 layers, 16 heads), "
                              "dropout 0", "sequence": seq, "masked": "15%", "precision": "bf16 autocast",
                     "optimizer": "AdamW lr 1e-4 (capturable)",
                     "attention": getattr(model.config, "_attn_implementation", None)},
                    step, [model, opt, ids, labels])


class _LSTMLM:
    """Embedding -> 2-layer LSTM -> decoder tied to the embedding."""

    def __init__(self, torch: Any, dev: Any, vocab: int, hidden: int, layers: int) -> None:
        nn = torch.nn
        self.embed = nn.Embedding(vocab, hidden).to(dev)
        self.rnn = nn.LSTM(hidden, hidden, num_layers=layers, batch_first=True, dropout=0.0).to(dev)
        self.bias = nn.Parameter(torch.zeros(vocab, device=dev))
        self.modules = nn.ModuleList([self.embed, self.rnn])

    def parameters(self) -> Any:
        return list(self.modules.parameters()) + [self.bias]

    def __call__(self, x: Any) -> Any:
        h, _ = self.rnn(self.embed(x))
        return h @ self.embed.weight.t() + self.bias


def _lstm(torch: Any, dev: Any, batch: int, seed: int, seq: int = 35, vocab: int = 33278,
          hidden: int = 200) -> TrainJob:
    # the defaults of PyTorch's word_language_model example (pytorch/examples):
    # --model LSTM --emsize 200 --nhid 200 --nlayers 2 --bptt 35 --batch_size 20
    # --lr 20 --clip 0.25 --tied, Wikitext-2's vocabulary of 33278 words
    torch.manual_seed(seed)
    g = torch.Generator(device=dev).manual_seed(seed)
    model = _LSTMLM(torch, dev, vocab, hidden, 2)
    model.modules.train()
    opt = torch.optim.SGD(model.parameters(), lr=20.0)
    loss_fn = torch.nn.CrossEntropyLoss()
    data = torch.randint(0, vocab, (batch, seq + 1), device=dev, generator=g)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    def step() -> Any:
        opt.zero_grad(set_to_none=False)
        # torch's own LSTM kernels, not cuDNN's: captured on a green context's
        # stream, cuDNN's RNN path recorded a kernel node of another context
        # (H200, cuDNN of torch 2.11) and the library refused the capture
        with torch.backends.cudnn.flags(enabled=False):
            logits = model(x)
        loss = loss_fn(logits.reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25, foreach=True)
        opt.step()
        return loss.detach()

    n, t = _count(model)
    return TrainJob("lstm", batch, "sequences", n, t,
                    {"model": f"2-layer LSTM language model (torch's LSTM kernels, cuDNN off), embedding = "
                              f"hidden = {hidden}, vocab {vocab}, tied decoder, dropout 0 (the example's 0.2 "
                              "draws CUDA random numbers)", "sequence": seq, "precision": "fp32",
                     "optimizer": "SGD lr 20, gradient clipping 0.25",
                     "config": "PyTorch word_language_model example defaults"},
                    step, [model, opt, x, y])


class _DeepFM:
    """DeepFM (Guo et al., IJCAI'17, section 2): y = sigmoid(first order +
    FM second order + DNN) over dense features and one embedding per sparse
    field."""

    def __init__(self, torch: Any, dev: Any, fields: int, rows: int, dim: int, dense: int) -> None:
        nn = torch.nn
        self.t = torch
        self.fields, self.rows, self.dim = fields, rows, dim
        self.emb = nn.Parameter(torch.randn(fields * rows, dim, device=dev) * 0.01)
        self.w1 = nn.Parameter(torch.zeros(fields * rows, 1, device=dev))
        self.dense = nn.Linear(dense, dim).to(dev)
        width = (fields + 1) * dim
        self.mlp = nn.Sequential(nn.Linear(width, 400), nn.ReLU(), nn.Linear(400, 400), nn.ReLU(),
                                 nn.Linear(400, 400), nn.ReLU(), nn.Linear(400, 1)).to(dev)
        self.offsets = torch.arange(fields, device=dev) * rows

    def parameters(self) -> Any:
        return [self.emb, self.w1] + list(self.dense.parameters()) + list(self.mlp.parameters())

    def __call__(self, dense_x: Any, sparse_x: Any) -> Any:
        B = sparse_x.shape[0]
        idx = (sparse_x + self.offsets).reshape(-1)
        e = self.emb.index_select(0, idx).view(B, self.fields, self.dim)  # backward: index_add, no sync
        first = self.w1.index_select(0, idx).view(B, self.fields).sum(1)
        v = self.t.cat([e, self.dense(dense_x).unsqueeze(1)], 1)  # [B, fields + 1, dim]
        fm = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(1)
        deep = self.mlp(v.reshape(B, -1)).squeeze(1)
        return first + fm + deep


def _deepfm(torch: Any, dev: Any, batch: int, seed: int) -> TrainJob:
    torch.manual_seed(seed)
    g = torch.Generator(device=dev).manual_seed(seed)
    fields, rows, dim, dense = 26, 40000, 16, 13
    model = _DeepFM(torch, dev, fields, rows, dim, dense)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
    dx = torch.randn(batch, dense, device=dev, generator=g)
    sx = torch.randint(0, rows, (batch, fields), device=dev, generator=g)
    y = (torch.rand(batch, device=dev, generator=g) < 0.25).float()
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def step() -> Any:
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(dx, sx), y)
        loss.backward()
        opt.step()
        return loss.detach()

    n, t = _count(model)
    return TrainJob("deepfm", batch, "samples", n, t,
                    {"model": f"DeepFM: {fields} sparse fields x {rows} rows x {dim}, {dense} dense, "
                              "MLP 400-400-400", "precision": "fp32", "optimizer": "AdamW lr 1e-3 (capturable)"},
                    step, [model, opt, dx, sx, y])


def _lora(torch: Any, dev: Any, batch: int, seed: int, seq: int = 256) -> TrainJob:
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    g = torch.Generator(device=dev).manual_seed(seed)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=4096, num_hidden_layers=12,
                      num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                      attention_dropout=0.0, tie_word_embeddings=False)
    with torch.device(dev):
        base = LlamaForCausalLM(cfg)
    base = base.to(torch.bfloat16)
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-4, capturable=True)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev, generator=g)

    def step() -> Any:
        opt.zero_grad(set_to_none=False)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        return loss.detach()

    n, t = _count(model)
    return TrainJob("lora_llama", batch, "sequences", n, t,
                    {"model": "transformers LlamaForCausalLM (hidden 1024, 12 layers, 16/4 heads, MLP 4096, vocab "
                              "32000), bf16 base frozen, peft LoRA r 16 alpha 32 on q/k/v/o",
                     "sequence": seq, "precision": "bf16 base, adapters as peft keeps them",
                     "optimizer": "AdamW lr 1e-4 (capturable) over the adapters"},
                    step, [model, opt, ids])


def _tiny(torch: Any, dev: Any, batch: int, seed: int) -> TrainJob:
    """Not a model: ``batch`` dependent one-block kernels (x += 1 on one
    element), a probe of how many kernels per second the GPU starts for one
    graph and for two at once."""
    x = torch.zeros(1, device=dev)

    def step() -> Any:
        for _ in range(batch):
            x.add_(1.0)
        return x[0]

    return TrainJob("tiny_kernels", batch, "kernels", 0, 0,
                    {"model": f"{batch} dependent one-block kernels (x += 1 on one fp32 element)"}, step, [x])


TRAIN_JOBS: Dict[str, Callable[..., TrainJob]] = {
    "resnet50": lambda torch, dev, batch, seed: _vision(torch, dev, batch, seed, 50),
    "resnet101": lambda torch, dev, batch, seed: _vision(torch, dev, batch, seed, 101),
    "bert_large": _bert,
    "lstm": _lstm,
    "deepfm": _deepfm,
    "lora_llama": _lora,
    "tiny_kernels": _tiny,
}


def build_train_job(name: str, torch: Any, dev: Any, batch: Optional[int] = None, seed: int = 1) -> TrainJob:
    """Builds a training job by key (TRAIN_JOBS); batch None = DEFAULT_BATCH.

    Raises KeyError for an unknown key; whatever torch, torchvision,
    transformers or peft raise while building."""
    return TRAIN_JOBS[name](torch, dev, batch if batch is not None else DEFAULT_BATCH[name], seed)


# ---- decoders ------------------------------------------------------------------------


class GPTJDecoder:
    """One decode step of a GPT-J-architecture model (Wang and Komatsuzaki,
    2021; transformers' GPTJ): per layer one LayerNorm feeding attention and
    the MLP in parallel, x + attn(ln(x)) + mlp(ln(x)); rotary embedding on the
    first ``rotary`` dimensions of each head (interleaved pairs, as GPT-J);
    MLP fc_in/GELU/fc_out with biases; final LayerNorm and an LM head with
    bias. Static inputs: tokens [B], positions [B]; the KV cache of --context
    positions starts random (a prompt already decoded), so every replay is the
    same computation. ``step() -> logits [B, vocab]`` (bf16)."""

    def __init__(self, torch: Any, dev: Any, batch: int, context: int, layers: int = 28, seed: int = 1,
                 hidden: int = 4096, heads: int = 16, rotary: int = 64, inter: int = 16384,
                 vocab: int = 50400) -> None:
        self.t, self.F = torch, torch.nn.functional
        self.B, self.C, self.L, self.H = batch, context, layers, heads
        self.D = hidden // heads
        self.R = rotary
        self.hidden, self.vocab = hidden, vocab
        r = RandomBF16(torch, dev, seed)
        w = r.w

        def ln() -> tuple:
            return r.norm(hidden), w(hidden, std=0.02)

        self.embed = w(vocab, hidden, std=0.02)
        self.layers = []
        for _ in range(layers):
            self.layers.append({
                "ln": ln(),
                "wqkv": w(hidden, 3 * hidden, std=hidden ** -0.5),
                "wo": w(hidden, hidden, std=hidden ** -0.5 / math.sqrt(2 * layers)),
                "fc_in": w(hidden, inter, std=hidden ** -0.5), "b_in": w(inter, std=0.02),
                "fc_out": w(inter, hidden, std=inter ** -0.5 / math.sqrt(2 * layers)), "b_out": w(hidden, std=0.02),
            })
        self.ln_f = ln()
        self.head = w(hidden, vocab, std=hidden ** -0.5)
        self.head_b = w(vocab, std=0.02)
        self.k_cache = w(layers, batch, heads, context, self.D, std=1.0)
        self.v_cache = w(layers, batch, heads, context, self.D, std=1.0)
        self.cos, self.sin = rope_tables(torch, dev, rotary, context, 10000.0)  # [C, R/2]
        self.ctx_idx = torch.arange(context, device=dev)
        self.b_idx = torch.arange(batch, device=dev)
        pos = (3 * context) // 4
        self.tokens = torch.randint(0, vocab, (batch,), device=dev, generator=r.gen)
        self.positions = torch.arange(pos - batch + 1, pos + 1, device=dev)

    def params(self) -> int:
        per = sum(t.numel() for v in self.layers[0].values() for t in (v if isinstance(v, tuple) else (v,)))
        return self.L * per + self.embed.numel() + self.head.numel() + self.head_b.numel() + 2 * self.hidden

    def rope(self, x: Any, cos: Any, sin: Any) -> Any:
        # x [B, H, D]; GPT-J rotates interleaved pairs of the first R dimensions
        xr, xp = x[..., : self.R].float(), x[..., self.R:]
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        rot = self.t.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).flatten(-2)
        return self.t.cat((rot.to(x.dtype), xp), -1)

    def step(self) -> Any:
        F = self.F
        B, H, D = self.B, self.H, self.D
        pos = self.positions
        x = self.embed[self.tokens]
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        mask = (self.ctx_idx[None, :] <= pos[:, None])[:, None, None, :]
        for li, lw in enumerate(self.layers):
            h = F.layer_norm(x, (self.hidden,), lw["ln"][0], lw["ln"][1])
            q, k, v = (h @ lw["wqkv"]).split(self.hidden, -1)
            q = self.rope(q.view(B, H, D), cos, sin)
            k = self.rope(k.view(B, H, D), cos, sin)
            kc, vc = self.k_cache[li], self.v_cache[li]
            kc[self.b_idx, :, pos] = k
            vc[self.b_idx, :, pos] = v.view(B, H, D)
            o = F.scaled_dot_product_attention(q.view(B, H, 1, D), kc, vc, attn_mask=mask)
            attn = o.reshape(B, H * D) @ lw["wo"]
            mlp = F.gelu(h @ lw["fc_in"] + lw["b_in"], approximate="tanh") @ lw["fc_out"] + lw["b_out"]
            x = x + attn + mlp
        x = F.layer_norm(x, (self.hidden,), self.ln_f[0], self.ln_f[1])
        return x @ self.head + self.head_b


def build_decoder(name: str, torch: Any, dev: Any, batch: int, context: int, layers: Optional[int] = None,
                  seed: int = 1) -> tuple:
    """(decoder, description dict) for ``llama3`` or ``gptj``; ``layers`` None =
    the full model's. The decoder has ``step() -> logits`` on static inputs."""
    if name == "llama3":
        a = argparse.Namespace(batch=batch, layers=layers or 32, context=context, heads=32, kv_heads=8,
                               head_dim=128, hidden=4096, intermediate=14336, vocab=128256, seed=seed,
                               position=None)
        d = Decoder(torch, a, dev)
        per = sum(t.numel() for t in d.layers[0].values())
        params = a.layers * per + d.embed.numel() + d.final_norm.numel()
        return d, {"arch": "Llama-3-8B shape (graph_decode.Decoder): hidden 4096, 32/8 heads of 128, SwiGLU 14336, "
                           "vocab 128256, RoPE theta 500000, embedding tied to the LM head",
                   "layers": a.layers, "params": params, "batch": batch, "context": context, "dtype": "bfloat16"}
    if name == "gptj":
        d = GPTJDecoder(torch, dev, batch, context, layers or 28, seed)
        return d, {"arch": "GPT-J-6B shape: hidden 4096, 16 heads of 256, rotary 64, parallel attention + MLP "
                           "16384 GELU, LayerNorm, vocab 50400", "layers": d.L, "params": d.params(),
                   "batch": batch, "context": context, "dtype": "bfloat16"}
    raise KeyError(name)


DECODERS = ("llama3", "gptj")


# ---- tenant threads -------------------------------------------------------------------


class Worker(threading.Thread):
    """A tenant's thread: owns its vCtx (made, used and closed on it) and runs
    what the main thread hands it, one thing at a time.

    ``call(fn, *args)`` runs ``fn(*args)`` on the thread and returns its
    result, re-raising its error as RuntimeError with the traceback.
    ``start_loop(body)`` runs ``body(stop)`` (a threading.Event) until
    ``end_loop()`` sets ``stop`` and waits for the body to return."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.cmds: "queue.Queue" = queue.Queue()
        self.replies: "queue.Queue" = queue.Queue()
        self.stop = threading.Event()
        self.start()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        self.cmds.put((fn, args))
        return self._reply(getattr(fn, "__name__", "call"))

    def start_loop(self, body: Callable[[threading.Event], None]) -> None:
        self.stop.clear()
        self.cmds.put((body, (self.stop,)))

    def end_loop(self) -> None:
        self.stop.set()
        self._reply("loop")

    def finish(self) -> None:
        """Ends the thread (after what was handed to it)."""
        self.cmds.put(None)
        self.join()

    def _reply(self, what: str) -> Any:
        ok, val = self.replies.get()
        if not ok:
            raise RuntimeError(f"{self.name}: {what} failed:\n{val}")
        return val

    def run(self) -> None:
        while True:
            item = self.cmds.get()
            if item is None:
                return
            fn, args = item
            try:
                self.replies.put((True, fn(*args)))
            except BaseException:  # noqa: BLE001 (reported to the caller)
                self.replies.put((False, traceback.format_exc()))


class Tenant:
    """A tenant driven from the main thread: its commands (methods ``_cmd``)
    run on its own :class:`Worker` thread, which owns its vCtx. ``call("x")``
    runs ``self._x()`` there and returns its result (re-raising its error);
    ``start_loop()`` runs ``self._loop(stop)`` until ``end_loop()``;
    ``looping`` says whether a loop is running; ``shut()`` closes it."""

    def __init__(self, name: str) -> None:
        self.looping = False
        self.worker = Worker(name)

    def call(self, cmd: str) -> Any:
        return self.worker.call(getattr(self, "_" + cmd))

    def start_loop(self) -> None:
        self.looping = True
        self.worker.start_loop(getattr(self, "_loop"))

    def end_loop(self) -> None:
        self.looping = False
        self.worker.end_loop()

    def shut(self) -> None:
        """Ends the loop if one runs, runs ``_close()`` on the tenant's thread and
        ends the thread; raises what ending the loop or ``_close()`` raised
        (the thread then still runs)."""
        if self.looping:
            self.end_loop()
        self.call("close")
        self.worker.finish()

    def window(self, settle_s: float, seconds: float) -> tuple:
        """Runs the loop alone: ``settle_s``, then a window of ``seconds``;
        returns the window's (start, end) in time.perf_counter() seconds."""
        self.start_loop()
        time.sleep(settle_s)
        t0 = time.perf_counter()
        time.sleep(seconds)
        t1 = time.perf_counter()
        self.end_loop()
        return t0, t1


def parse_batches(p: argparse.ArgumentParser, text: str) -> Dict[str, int]:
    """``--batch`` of the examples: "model=N,..." -> {model: N}; p.error on a bad entry."""
    out: Dict[str, int] = {}
    for kv in [x for x in text.split(",") if x]:
        k, _, v = kv.partition("=")
        if not v.isdigit() or int(v) < 1:
            p.error(f"--batch entry {kv!r}: want model=N")
        out[k] = int(v)
    return out


class TrainTenant(Tenant):
    """A training job (TRAIN_JOBS) on its own thread (a :class:`Worker`) and
    vCtx (class BE, named ``label``), its step a graph of the vCtx (or, when
    the capture fails or ``graphs`` is false, an eager section; ``info`` says
    which and why).

    ``call("build")`` builds the model, creates the vCtx and captures the
    step (three eager warm-up steps first; with ``segment_us`` > 0 the graph
    is cut into segments of at most that long, VCtx.graph's segment_us, at
    its first replay, which the build runs); ``start_loop()`` / ``end_loop()``
    run steps back to back, each replayed and then synchronized (a training
    loop that reads its loss every step), recording in ``ends``, ``host_us``
    (the replay call) and ``wall_ms`` (replay to synchronize); ``call("loss")``
    reads the last loss; ``call("close")`` frees the graph and the vCtx."""

    def __init__(self, rt: Any, label: str, model: str, batch: Optional[int], seed: int, graphs: bool,
                 segment_us: int = 0) -> None:
        self.rt, self.label, self.model, self.batch, self.seed, self.graphs = rt, label, model, batch, seed, graphs
        self.segment_us = segment_us
        self.ends: List[float] = []
        self.host_us: List[float] = []
        self.wall_ms: List[float] = []
        self.info: Dict[str, Any] = {}
        self.vctx: Any = None
        self.graph: Any = None
        super().__init__(label)

    # -- on the job's thread -----------------------------------------------------

    def _build(self) -> Dict[str, Any]:
        import torch
        dev = torch.device("cuda", 0)
        t0 = time.perf_counter()
        torch.cuda.reset_peak_memory_stats()
        self.job: Any = build_train_job(self.model, torch, dev, self.batch, self.seed)
        # built on this thread's current stream, which the vCtx's streams are not
        # ordered with: the weights and inputs must be written before its first step
        torch.cuda.synchronize()
        self.vctx = self.rt.vctx(self.label, cls="be")
        self.graph = None
        info: Dict[str, Any] = {"job": self.model, "batch": self.job.batch, "unit": self.job.unit,
                                "params": self.job.params, "trainable": self.job.trainable, **self.job.desc}
        if self.graphs:
            try:
                # segment_us only when asked: a binding without segments still builds the others
                seg = {"segment_us": self.segment_us} if self.segment_us else {}
                self.graph = self.vctx.graph(self.job.step, warmup=3, name=self.model, **seg)
                info.update(graph=True)
            except Exception as e:  # noqa: BLE001 (the job runs eagerly; the JSON says why)
                info.update(graph=False, graph_error=f"{type(e).__name__}: {e}"[:2000])
                self.graph = None
        else:
            info.update(graph=False, graph_error="--no-graphs")
        if self.graph is None:
            for _ in range(3):
                self._eager()
        else:
            if self.segment_us:  # the first replay measures the step: where the bound applies
                self.vctx.remap(self.rt.info().full_pctx)
            self.graph.replay()  # the captures ran nothing: one step writes the static loss
        self.vctx.synchronize()
        if self.graph is not None:  # a segmented graph is instantiated after its first replay
            ps = [p for p in self.graph.stats().pctx if p.instantiated]
            info.update(graph_pctxs=len(ps), graph_kernel_nodes=max((p.kernel_nodes for p in ps), default=0),
                        graph_capture_ms=sum(p.capture_us for p in ps) / 1e3,
                        graph_instantiate_ms=sum(p.instantiate_us for p in ps) / 1e3)
        if self.graph is not None and self.segment_us:
            st = self.graph.stats()  # the first replay cut the step
            info["segment_us"] = self.segment_us
            for k in ("pieces", "segments", "uncut", "cut_points", "step_us", "longest_segment_us"):
                v = getattr(st, k, None)
                info[k] = v.name.lower() if hasattr(v, "name") else v
        loss = (self.graph.outputs if self.graph is not None else self.last_loss).float().item()
        info.update(build_s=time.perf_counter() - t0, first_loss=loss,
                    peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30)
        self.info = info
        return info

    def _eager(self) -> None:
        import torch

        with self.vctx.section() as s, torch.cuda.stream(s):
            self.last_loss = self.job.step()

    def _loop(self, stop: threading.Event) -> None:
        replay = self.graph.replay if self.graph is not None else self._eager
        sync = self.vctx.synchronize
        ends, host, wall = self.ends, self.host_us, self.wall_ms
        ends.clear()
        host.clear()
        wall.clear()
        while not stop.is_set():
            t0 = time.perf_counter()
            replay()
            t1 = time.perf_counter()
            sync()
            t2 = time.perf_counter()
            ends.append(t2)
            host.append((t1 - t0) * 1e6)
            wall.append((t2 - t0) * 1e3)

    def _loss(self) -> float:
        self.vctx.synchronize()
        t = self.graph.outputs if self.graph is not None else self.last_loss
        return float(t.float().item())

    def _close(self) -> None:
        import torch

        if self.graph is not None:
            self.graph.close()
            self.graph = None
        if self.vctx is not None:
            self.vctx.synchronize()
            self.vctx.close()
        self.job = None
        gc.collect()
        torch.cuda.empty_cache()


def rate_in(ends: List[float], t0: float, t1: float) -> Dict[str, float]:
    """Steps completed in [t0, t1] over the window."""
    n = sum(1 for e in ends if t0 <= e <= t1)
    return {"steps": n, "steps_per_s": n / (t1 - t0) if t1 > t0 else float("nan")}


def host_share(job: "TrainTenant", t0: float, t1: float) -> Dict[str, float]:
    """Median enqueue (host) time and step wall time of the steps that ended in the window."""
    idx = [i for i, e in enumerate(job.ends) if t0 <= e <= t1]
    if not idx:
        return {"host_us_p50": float("nan"), "step_ms_p50": float("nan"), "host_over_step": float("nan")}
    h = statistics.median(job.host_us[i] for i in idx)
    w = statistics.median(job.wall_ms[i] for i in idx)
    return {"host_us_p50": h, "step_ms_p50": w, "host_over_step": h / (w * 1e3) if w > 0 else float("nan")}
