#!/usr/bin/env python3
"""Session 23: the UK form's identities in float64 on random data (numpy).
With u = s_u k^ (U = s_u K): K A0 - tril(K Z^T) Z == D^{-1} Z / s_u (rows: a_t before normalising,
= A_t k^_t by the Sherman-Morrison recurrence), and strict(K Al^T) == strict(L) diag(n) / s_u (the
dropped lw-from-l variant). Prints the largest absolute differences.
Usage: python3 check_identity.py"""
import numpy as np

rng = np.random.default_rng(1)
worst = [0.0, 0.0, 0.0]
for C, d, su in [(8, 5, 0.7), (64, 32, 1.0), (64, 64, 3.0), (16, 64, 0.3)]:
    K = rng.standard_normal((C, d))
    K /= np.linalg.norm(K, axis=1, keepdims=True)
    U = su * K
    M = rng.standard_normal((d, d))
    A0 = np.linalg.inv(0.1 * np.eye(d) + M @ M.T / d)
    UA = U @ A0
    L = np.linalg.cholesky(np.eye(C) + UA @ U.T)
    Z = np.linalg.solve(L, UA)
    Al = K @ A0 - np.tril(K @ Z.T) @ Z            # VLA-MATH 2.3 as written
    Al2 = Z / np.diag(L)[:, None] / su            # the UK form
    A, seq = A0.copy(), np.empty_like(Al)         # the recurrence
    for t in range(C):
        z = A @ U[t]
        A = A - np.outer(z, z) / (1 + U[t] @ z)
        seq[t] = A @ K[t]
    n = 1 / np.linalg.norm(Al2, axis=1)
    Lw = np.tril(K @ (Al2 * n[:, None]).T, -1)
    Lw2 = np.tril(L, -1) * (n / np.diag(L) / su)[None, :] / su
    worst = [max(worst[0], abs(Al - Al2).max() / abs(Al).max()), max(worst[1], abs(seq - Al2).max() / abs(seq).max()),
             max(worst[2], abs(Lw - Lw2).max() / abs(Lw).max())]
print(f"K A0 - tril(K Z^T) Z vs D^-1 Z / s_u: {worst[0]:.1e} (relative to the largest entry)")
print(f"A_t k^_t (recurrence) vs D^-1 Z / s_u: {worst[1]:.1e}")
print(f"strict(K Al^T) vs strict(L) diag(n) / s_u: {worst[2]:.1e}")
