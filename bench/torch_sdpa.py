#!/usr/bin/python3
"""PyTorch's attention on the shapes bench_cuda_kernels times forge's on, on
the same GPU: torch.nn.functional.scaled_dot_product_attention, forward and
backward (out.backward(dO)), one sequence of T tokens, H query heads, Hkv
key/value heads (enable_gqa where torch and the kernel take it; else K and V
repeated to H inside the timed region), head dim D. The backward's time is
that of forward and backward less the forward's.

Mask: causal (is_causal=True), or a tree bin given by --subtree-end FILE (T
ints, one per line: query i sees key j iff j <= i < subtree_end[j]) as a
boolean mask, which only the memory-efficient and math kernels take.
Kernels timed, each where it runs: bf16 FlashAttention, bf16 cuDNN, bf16
memory-efficient, FP32 memory-efficient (TF32 off for matmuls; on sm_80
and later this kernel multiplies on tensor cores anyway, in 3xTF32: each
FP32 operand split into two TF32 parts, three MMAs a product, CUTLASS's
OpMultiplyAddFastF32 in torch's mem_eff_attention/gemm_kernel_utils.h,
whatever the TF32 flags say). Prints one line per
kernel: "torch_sdpa <name> <fwd_ms> <bwd_ms>" (medians over --reps after two
warm-ups), or "torch_sdpa <name> unavailable <reason>"."""
import argparse
import statistics
import time
import warnings

import torch

# torch explains at length why each backend it was not asked for is not
# used (a UserWarning per kernel and mask); the "unavailable" line says what
# matters.
warnings.filterwarnings("ignore", category=UserWarning)


def timed(fn, reps):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, required=True)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--subtree-end", default="")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_sdpa: no CUDA device for torch")
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        raise SystemExit(f"torch_sdpa: torch {torch.__version__} lacks torch.nn.attention (2.3 or later has it)")

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    T, H, Hkv, D = a.T, a.heads, a.kv_heads, a.dim
    mask = None
    if a.subtree_end:
        with open(a.subtree_end) as f:
            se = torch.tensor([int(x) for x in f.read().split()], device=dev)
        if se.numel() != T:
            raise SystemExit(f"torch_sdpa: {a.subtree_end} has {se.numel()} entries, T is {T}")
        i = torch.arange(T, device=dev)
        mask = (i[None, :] <= i[:, None]) & (i[:, None] < se[None, :])  # [query, key]

    g = torch.Generator(device=dev).manual_seed(0)
    base = [torch.randn(1, h, T, D, device=dev, generator=g) for h in (H, Hkv, Hkv)]
    dout = torch.randn(1, H, T, D, device=dev, generator=g)
    kernels = [("bf16_flash", torch.bfloat16, SDPBackend.FLASH_ATTENTION),
               ("bf16_cudnn", torch.bfloat16, SDPBackend.CUDNN_ATTENTION),
               ("bf16_efficient", torch.bfloat16, SDPBackend.EFFICIENT_ATTENTION),
               ("fp32_efficient", torch.float32, SDPBackend.EFFICIENT_ATTENTION)]
    for name, dtype, backend in kernels:
        q, k, v = (x.to(dtype).requires_grad_() for x in base)
        do = dout.to(dtype)

        def fwd(native_gqa):
            for x in (q, k, v):
                x.grad = None  # no accumulation across repetitions
            kk, vv, extra = k, v, {"enable_gqa": True}
            if not native_gqa:
                kk, vv, extra = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1), {}
            if mask is None:
                return torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=True, **extra)
            return torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, **extra)

        error = ""
        # enable_gqa first (torch 2.5 and later); a torch or kernel without it
        # raises (TypeError, RuntimeError) and K, V are repeated instead. The
        # signature of the builtin is not inspectable (torch 2.11).
        for native_gqa in ([True, False] if H != Hkv else [False]):
            try:
                with sdpa_kernel([backend]):
                    fwd_ms = timed(lambda: fwd(native_gqa), a.reps)
                    both_ms = timed(lambda: fwd(native_gqa).backward(do), a.reps)
                print(f"torch_sdpa {name} {fwd_ms:.3f} {max(both_ms - fwd_ms, 0.0):.3f}", flush=True)
                error = ""
                break
            except (RuntimeError, TypeError) as e:
                error = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        if error:
            print(f"torch_sdpa {name} unavailable {error}", flush=True)

if __name__ == "__main__":
    main()
