#!/usr/bin/python3
"""The same training step as bench_train_step in PyTorch: a Llama-style decoder
(RMSNorm, GQA attention with RoPE, SwiGLU, untied head), causal attention,
token-mean cross-entropy, backward, gradient clipping and AdamW. Prints
"torch_tok_s <value>" (median over --reps steps after one warm-up step);
on CUDA, "torch_peak_bytes <value>" (torch.cuda.max_memory_allocated); on
the CPU, "torch_blas_core <name>": the OpenBLAS core torch's GEMMs ran on
(Debian's torch calls the system BLAS, libblas.so.3; "unknown" for another
BLAS), which OPENBLAS_CORETYPE in the environment decides where it is set.

--device cpu|cuda; --dtype fp32 (TF32 off) or bf16 (autocast to bf16, FP32
master weights, loss in FP32); --attention explicit (masked softmax), sdpa
(torch.nn.functional.scaled_dot_product_attention with is_causal, which
picks FlashAttention or cuDNN in bf16 on a GPU, a fused kernel on the CPU)
or auto (the default: sdpa where torch has it, 2.0 or later, else explicit);
prints "torch_attention <name>", the one that ran."""
import argparse
import ctypes
import math
import statistics
import time

import torch


def blas_core():
    """The OpenBLAS core of the BLAS torch loaded (the same library handle)."""
    try:
        name = ctypes.CDLL("libblas.so.3").openblas_get_corename
    except (OSError, AttributeError):
        return "unknown"
    name.restype = ctypes.c_char_p
    return name().decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=688)
    ap.add_argument("--vocab", type=int, default=272)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--attention", choices=["explicit", "sdpa", "auto"], default="auto")
    a = ap.parse_args()
    if a.attention == "auto":
        a.attention = "sdpa" if hasattr(torch.nn.functional, "scaled_dot_product_attention") else "explicit"
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.attention == "sdpa" and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        raise SystemExit(f"torch {torch.__version__} has no scaled_dot_product_attention (2.0 or later has)")
    dev = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    d, H, Hkv, F, V, L = a.d_model, a.heads, a.kv_heads, a.ffn, a.vocab, a.layers
    hd = d // H

    def lin(o, i):
        return torch.nn.Parameter(torch.randn(o, i, device=dev) * 0.02)

    def ones(n):
        return torch.nn.Parameter(torch.ones(n, device=dev))

    params = {"embed": lin(V, d), "head": lin(V, d), "norm": ones(d)}
    for l in range(L):
        params[f"{l}.an"] = ones(d)
        params[f"{l}.qkv"] = lin((H + 2 * Hkv) * hd, d)
        params[f"{l}.wo"] = lin(d, H * hd)
        params[f"{l}.mn"] = ones(d)
        params[f"{l}.gu"] = lin(2 * F, d)
        params[f"{l}.down"] = lin(d, F)
    opt = torch.optim.AdamW(params.values(), lr=1e-4, betas=(0.9, 0.95), eps=1e-15, weight_decay=0.1)

    T = a.seq
    pos = torch.arange(T, dtype=torch.float64)
    inv = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = pos[:, None] * inv[None, :]
    cos, sin = torch.cos(ang).float().to(dev), torch.sin(ang).float().to(dev)
    mask = torch.full((T, T), float("-inf"), device=dev).triu(1)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(x):  # x [B, T, h, hd], interleaved pairs
        x0, x1 = x[..., 0::2], x[..., 1::2]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

    def step(tokens):
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = forward(tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
        return loss.item()  # waits for the device

    def forward(tokens):
        B = tokens.shape[0]
        x = params["embed"][tokens]
        for l in range(L):
            h = rms(x, params[f"{l}.an"])
            qkv = h @ params[f"{l}.qkv"].t()
            q = rope(qkv[..., : H * hd].view(B, T, H, hd))
            k = rope(qkv[..., H * hd:(H + Hkv) * hd].view(B, T, Hkv, hd))
            v = qkv[..., (H + Hkv) * hd:].view(B, T, Hkv, hd)
            k = k.repeat_interleave(H // Hkv, dim=2)
            v = v.repeat_interleave(H // Hkv, dim=2)
            if a.attention == "sdpa":
                o = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            else:
                att = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)) / math.sqrt(hd) + mask
                o = att.softmax(-1) @ v.transpose(1, 2)
            o = o.transpose(1, 2).reshape(B, T, H * hd)
            x = x + o @ params[f"{l}.wo"].t()
            h = rms(x, params[f"{l}.mn"])
            gu = h @ params[f"{l}.gu"].t()
            x = x + (torch.nn.functional.silu(gu[..., :F]) * gu[..., F:]) @ params[f"{l}.down"].t()
        h = rms(x, params["norm"])[:, :-1]
        logits = h.reshape(-1, d) @ params["head"].t()
        return torch.nn.functional.cross_entropy(logits.float(), tokens[:, 1:].reshape(-1))

    tokens = torch.randint(0, V, (a.batch, T), device=dev)
    step(tokens)
    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        step(tokens)
        times.append(time.perf_counter() - t0)
    print(f"torch_tok_s {a.batch * T / statistics.median(times):.1f}")
    print(f"torch_attention {a.attention}")
    if a.device == "cuda":
        print(f"torch_peak_bytes {torch.cuda.max_memory_allocated()}")
    else:
        print(f"torch_blas_core {blas_core()}")


if __name__ == "__main__":
    main()
