#!/usr/bin/env python3
"""Median latency of two vla-bench CSVs side by side: python3 benchmarks/compare_backends.py a.csv b.csv [T,...]
Prints a markdown table of every (mechanism, algo, T) both runs measured, with the ratio b / a."""
import csv
import sys


def load(path):
    rows = {}
    for r in csv.DictReader(open(path)):
        if r.get("median_ms"):
            rows[(r["mechanism"], r["algo"], int(r["T"]))] = (float(r["median_ms"]), r["backend"])
    return rows


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: compare_backends.py a.csv b.csv [T,T,...]")
    a, b = load(sys.argv[1]), load(sys.argv[2])
    only = {int(t) for t in sys.argv[3].split(",")} if len(sys.argv) > 3 else None
    na = next(iter(a.values()))[1] if a else "a"
    nb = next(iter(b.values()))[1] if b else "b"
    print(f"| mechanism | algo | T | {na} ms | {nb} ms | {nb} / {na} |")
    print("|---|---|--:|--:|--:|--:|")
    for k in sorted(set(a) & set(b)):
        if only is None or k[2] in only:
            print(f"| {k[0]} | {k[1]} | {k[2]} | {a[k][0]:.3f} | {b[k][0]:.3f} | {b[k][0] / a[k][0]:.2f}x |")


if __name__ == "__main__":
    main()
