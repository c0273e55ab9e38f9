#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention (causal) at the shapes of `vla-bench --targets`, fp32 and
bf16: the baseline the libvla CUDA numbers are read against. Timed with torch.cuda.Event around
each call, median of the repetitions after warm-up, rotating over 3 input sets (so repeated
calls do not read a warm L2). Inputs N(0,1), layout [B, H, T, d] (SDPA's).

With --backward, forward + backward in one timed interval (dq, dk, dv from a random dO, the
interval `vla-bench --backward` times), at the backward issue's shapes unless --shapes says.

Usage: python3 benchmarks/bench_sdpa.py [--quick] [--backward] [--shapes B,H,d,T;...] [--json FILE]
Prints a markdown table on stdout; progress on stderr."""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F

SHAPES = [(1, 4, 32, 2048), (1, 4, 32, 8192), (1, 4, 32, 32768), (1, 4, 32, 131072),
          (8, 16, 64, 2048), (8, 16, 64, 32768)]


BACKWARD_SHAPES = [(1, 4, 32, 2048), (1, 4, 32, 8192), (1, 4, 32, 32768), (8, 16, 64, 2048), (8, 16, 64, 8192)]


def time_sdpa(B, H, d, T, dtype, reps, warm, backward=False):
    # backward: q, k, v need gradients, and each set carries its dO
    sets = [[torch.randn(B, H, T, d, device="cuda", dtype=dtype, requires_grad=backward) for _ in range(4)]
            for _ in range(3)]

    def call(i):
        q, k, v, do = sets[i % 3]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if backward:
            for x in (q, k, v):
                x.grad = None
            o.backward(do)

    for i in range(warm):
        call(i)
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        call(i)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
        if sum(times) > 5000 and len(times) >= 3:
            break
    del sets
    torch.cuda.empty_cache()
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 repetitions, T <= 32768")
    ap.add_argument("--backward", action="store_true", help="time forward + backward (dq, dk, dv)")
    ap.add_argument("--shapes", help="B,H,d,T;B,H,d,T;... (default: the targets' shapes, or with --backward "
                    "(1,4,32) T = 2048, 8192, 32768 and (8,16,64) T = 2048, 8192)")
    ap.add_argument("--json", help="write every row with its raw samples here")
    args = ap.parse_args()
    shapes = BACKWARD_SHAPES if args.backward else SHAPES
    if args.shapes:
        try:
            shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes.replace(" ", ";").split(";") if s]
            if any(len(t) != 4 or min(t) < 1 for t in shapes):
                raise ValueError
        except ValueError:
            print(f"bench_sdpa: --shapes {args.shapes}: want B,H,d,T;... (positive integers)", file=sys.stderr)
            return 2
    if not torch.cuda.is_available():
        print("bench_sdpa: no CUDA device", file=sys.stderr)
        return 77
    dev = torch.cuda.get_device_name(0)
    rows = []
    for (B, H, d, T) in shapes:
        if args.quick and T > 32768:
            continue
        for dtype in (torch.float32, torch.bfloat16):
            name = "fp32" if dtype == torch.float32 else "bf16"
            flop = 2 * B * H * (T * (T + 1) / 2) * (2 * d)  # causal pairs x (QK^T + PV)
            if args.backward:
                flop *= 3.5  # + dV, dP, dQ, dK and the recomputed S = QK^T: 5 products of the 2 above
            try:
                t = time_sdpa(B, H, d, T, dtype, 3 if args.quick else 20, 2 if args.quick else 3, args.backward)
                med = statistics.median(t)
                rows.append(dict(shape=f"({B},{H},{d}) T={T}", dtype=name, median_ms=med, min_ms=min(t),
                                 max_ms=max(t), tflops=flop / (med * 1e-3) / 1e12, samples_ms=t, status="ok"))
                print(f"  ({B},{H},{d}) T={T} {name}: {med:.4f} ms", file=sys.stderr)
            except Exception as e:  # out of memory, no kernel for the dtype, ...
                torch.cuda.empty_cache()
                rows.append(dict(shape=f"({B},{H},{d}) T={T}", dtype=name, status=f"failed: {type(e).__name__}: "
                                 + str(e).split("\n")[0][:80]))
                print(f"  ({B},{H},{d}) T={T} {name}: {rows[-1]['status']}", file=sys.stderr)
    what = "forward + backward" if args.backward else "forward"
    print(f"\n## PyTorch {torch.__version__} SDPA (causal), {what}, on {dev}\n")
    print("| shape | dtype | median ms | min..max ms | TFLOP/s (causal) |")
    print("|---|---|---:|---|---:|")
    for r in rows:
        if r["status"] != "ok":
            print(f"| {r['shape']} | {r['dtype']} | {r['status']} | | |")
        else:
            print(f"| {r['shape']} | {r['dtype']} | {r['median_ms']:.4f} | {r['min_ms']:.4f}..{r['max_ms']:.4f} "
                  f"| {r['tflops']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=dev, torch=torch.__version__, backward=args.backward, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
