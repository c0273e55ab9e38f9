#!/usr/bin/env python3
"""paper_tables.py: the tables of benchmarks/reproduce_paper.sh's results folder.

Usage: python3 benchmarks/paper_tables.py RESULTS

Reads RESULTS/plan.csv (the planned runs, one row per experiment and run) and each run's
RESULTS/runs/NAME/summary.csv (vla-train's; where a vla-train without it ran: the accuracy and
the state norms from stdout.txt, the rest from train.csv), and writes:
  RESULTS/tables.md      one table per experiment, the paper's numbers (docs/TRAINER.md, "What
                         the paper reports") beside ours, mean +- std over seeds, runs missing
                         marked; the state norms; the runs not done
  RESULTS/results.csv    one row per run: the plan's fields and the outcome
  RESULTS/README.md      the folder's description (device, commit and command from
                         RESULTS/invocations.txt where reproduce_paper.sh wrote it)
  RESULTS/plots/*.dat, *.runs   the data of benchmarks/plot_paper.sh's plots
Python 3 standard library only. Exit status: 0 written, 1 bad input, 2 bad command line.
"""
import csv
import math
import os
import re
import sys

MECHS = ["softmax", "linear", "deltanet", "delta", "vla"]
LABEL = {
    "softmax": "softmax",
    "linear": "linear",
    "deltanet": "DeltaNet (the paper's, `deltanet`)",
    "delta": "standard DeltaNet (`delta`, not in the paper)",
    "vla": "VLA (`vla`)",
}
SHORT = {"softmax": "softmax", "linear": "linear", "deltanet": "DeltaNet", "delta": "std. DeltaNet", "vla": "VLA"}
# docs/TRAINER.md, "What the paper reports".
PAPER_T9 = {"softmax": (0.081, 0.002), "linear": (0.074, 0.003), "deltanet": (0.011, 0.002), "vla": (1.000, 0.000)}
PAPER_T11_N = [8, 16, 24, 32, 48]
PAPER_T11 = {
    "softmax": [0.152, 0.091, 0.070, 0.057, 0.043],
    "linear": [0.150, 0.091, 0.069, 0.056, 0.043],
    "deltanet": [0.965, 0.009, 0.007, 0.008, 0.008],
    "vla": [0.997, 0.990, 0.994, 0.623, 0.044],
}
PAPER_F6 = {"softmax": "about 0.14-0.15", "linear": "about 0.14-0.15", "deltanet": "about 0.01", "vla": "1.000 at every T"}
PAPER_F6_VALUE = {"softmax": 0.145, "linear": 0.145, "deltanet": 0.01, "vla": 1.0}  # for the plot
PAPER_COPY = "100% by about step 150 (Table 7), every model"


def die(msg, code=1):
    print(f"paper_tables.py: {msg}", file=sys.stderr)
    sys.exit(code)


def num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_result(rdir):
    """The outcome of one run folder: status done / interrupted / failed / not run and numbers."""
    r = {"status": "not run", "eval_acc": None, "final_loss": None, "wall_s": None, "ms_per_step": None,
         "S_mean": None, "S_max": None, "A_mean": None, "A_max": None, "last_step": None, "device": "",
         "first99": None, "evals": [], "detail": ""}
    if not os.path.isdir(rdir):
        return r
    rows = []
    tpath = os.path.join(rdir, "train.csv")
    if os.path.isfile(tpath):
        try:
            rows = [x for x in read_csv(tpath) if (x.get("step") or "").isdigit()]
        except (OSError, csv.Error):
            rows = []
    if rows:
        r["last_step"] = int(rows[-1]["step"])
        r["final_loss"] = num(rows[-1].get("loss"))
        r["wall_s"] = num(rows[-1].get("elapsed_s"))
        for x in rows:
            a = num(x.get("eval_acc"))
            if a is None:
                continue
            r["evals"].append((int(x["step"]), a))
            if a >= 0.99 and r["first99"] is None:
                r["first99"] = int(x["step"])
    out = ""
    spath = os.path.join(rdir, "stdout.txt")
    if os.path.isfile(spath):
        with open(spath, errors="replace") as f:
            out = f.read()
        m = re.search(r"^vla-train: .* on (.*)$", out, re.M)
        if m:
            r["device"] = m.group(1)
    sumpath = os.path.join(rdir, "summary.csv")
    rc = None
    try:
        with open(os.path.join(rdir, "exit.txt")) as f:
            rc = int(f.read().strip() or "-1")
    except (OSError, ValueError):
        pass
    if os.path.isfile(sumpath):
        try:
            s = read_csv(sumpath)[0]
        except (OSError, csv.Error, IndexError):
            s = {}
        st = s.get("status", "")
        r["status"] = "done" if st == "done" else ("interrupted" if st == "interrupted" else "failed")
        for k, c in (("eval_acc", "eval_acc"), ("final_loss", "final_loss"), ("wall_s", "wall_s"),
                     ("ms_per_step", "ms_per_step"), ("S_mean", "S_norm_mean"), ("S_max", "S_norm_max"),
                     ("A_mean", "A_norm_mean"), ("A_max", "A_norm_max")):
            v = num(s.get(c))
            if v is not None or k in ("eval_acc", "S_mean", "S_max", "A_mean", "A_max"):
                r[k] = v
    else:
        # a vla-train without summary.csv: the closing lines of its stdout
        m = re.search(r"^eval: .*accuracy ([0-9.eE+-]+|nan)", out, re.M)
        if m and rc == 0:
            r["status"] = "done"
            r["eval_acc"] = num(m.group(1))
            # the exact fraction where the line gives the counts
            c = re.search(r"^eval: .*accuracy \S+ \((\d+) of (\d+) target positions", out, re.M)
            if c and int(c.group(2)) > 0:
                r["eval_acc"] = int(c.group(1)) / int(c.group(2))
            S = [num(v) for v in re.findall(r"\|S\| ([^ ;]+)", out)]
            A = [num(v) for v in re.findall(r"\|A\| ([^ ;]+)", out)]
            S = [v for v in S if v is not None]
            A = [v for v in A if v is not None]
            if S:
                r["S_mean"], r["S_max"] = sum(S) / len(S), max(S)
            if A:
                r["A_mean"], r["A_max"] = sum(A) / len(A), max(A)
        elif os.path.isfile(os.path.join(rdir, "checkpoint.bin")):
            r["status"] = "interrupted"
        else:
            r["status"] = "failed"
    if r["status"] == "interrupted":
        r["detail"] = f"cut at step {r['last_step'] or 0}"
    elif r["status"] == "failed":
        err = ""
        try:
            with open(os.path.join(rdir, "stderr.txt"), errors="replace") as f:
                lines = [x.strip() for x in f if x.strip()]
            err = lines[-1][:160] if lines else ""
        except OSError:
            pass
        r["detail"] = f"failed (exit {rc if rc is not None else '?'}{': ' + err if err else ''})"
    return r


def result_from_row(row):
    """A run's outcome as results.csv recorded it (its logs are not here)."""
    st = row.get("status", "") or "not run"
    word = st if st in ("done", "not run", "failed", "interrupted") else ("interrupted" if st.startswith("cut") else "failed")
    return {"status": word, "eval_acc": num(row.get("eval_acc")), "final_loss": num(row.get("final_loss")),
            "wall_s": num(row.get("wall_s")), "ms_per_step": num(row.get("ms_per_step")),
            "S_mean": num(row.get("S_norm_mean")), "S_max": num(row.get("S_norm_max")),
            "A_mean": num(row.get("A_norm_mean")), "A_max": num(row.get("A_norm_max")), "last_step": None,
            "device": "", "first99": row.get("first_eval_ge_0.99") or None, "evals": [],
            "detail": "" if word == st else st}


def mean_std(vals):
    """mean and population std (ddof 0, numpy's default) of the values that are numbers."""
    v = [x for x in vals if x is not None]
    if not v:
        return None, None, 0
    m = sum(v) / len(v)
    return m, math.sqrt(sum((x - m) ** 2 for x in v) / len(v)), len(v)


def f3(x):
    return "-" if x is None else f"{x:.3f}"


def fnorm(x):
    if x is None:
        return "n/a"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


class Results:
    def __init__(self, root):
        self.root = root
        plan = os.path.join(root, "plan.csv")
        if not os.path.isfile(plan):
            die(f"'{root}' holds no plan.csv (not a reproduce_paper.sh results folder)")
        try:
            self.plan = read_csv(plan)
        except (OSError, csv.Error) as e:
            die(f"{plan}: {e}")
        need = {"experiment", "name", "task", "mechanism", "pairs", "seq_len", "steps", "seed", "lr", "eval_every"}
        if not self.plan or not need <= set(self.plan[0].keys()):
            die(f"{plan}: not the plan's columns ({', '.join(sorted(need))})")
        self.res = {}
        self.settings = ""
        try:
            with open(os.path.join(root, "settings.txt")) as f:
                self.settings = f.read().strip()
        except OSError:
            pass
        self.mechs = [m for m in MECHS if any(p["mechanism"] == m for p in self.plan)]
        # A folder brought back without its runs/ (a device call returns a few files): the
        # outcomes come from the results.csv written where the runs were, not from "not run".
        if not os.path.isdir(os.path.join(root, "runs")) and os.path.isfile(os.path.join(root, "results.csv")):
            self.res = {row["name"]: result_from_row(row) for row in read_csv(os.path.join(root, "results.csv"))}

    def get(self, name):
        if name not in self.res:
            self.res[name] = run_result(os.path.join(self.root, "runs", name))
        return self.res[name]

    def rows(self, exp, **kw):
        out = []
        for p in self.plan:
            if p["experiment"] != exp:
                continue
            if all(str(p[k]) == str(v) for k, v in kw.items()):
                out.append(p)
        return out

    def best_lr(self, mech, sweep_rows):
        """The sweep's best rate of a mechanism: highest eval accuracy, then lowest final loss."""
        best = None
        for p in sweep_rows:
            if p["mechanism"] != mech:
                continue
            r = self.get(p["name"])
            if r["status"] != "done" or r["eval_acc"] is None:
                continue
            key = (r["eval_acc"], -(r["final_loss"] if r["final_loss"] is not None else math.inf))
            if best is None or key > best[0]:
                best = (key, p["lr"])
        return best[1] if best else None

    def resolve(self, p, best):
        """A plan row's run name (lr 'best': the mechanism's best rate, or None)."""
        if p["lr"] != "best":
            return p["name"]
        lr = best.get(p["mechanism"])
        if lr is None:
            return None
        return p["name"][: -len("lrbest")] + "lr" + lr


def cell(rs, vals, total):
    """mean +- std over the seeds done, how many of how many, or the runs' status."""
    m, s, n = mean_std(vals)
    if n == 0:
        st = [state_word(r) for r in rs if r] if rs else []
        return st[0] if len(set(st)) == 1 and st else ("not run" if not st else "; ".join(sorted(set(st))))
    txt = f"{m:.3f} ± {s:.3f}" if total > 1 else f"{m:.3f}"
    if total > 1 and n < total:
        txt += f" ({n} of {total} seeds)"
    return txt


def state_word(r):
    """A table cell's word for a run without a number (the details: the list of runs not done)."""
    return {"interrupted": r["detail"] or "cut", "failed": "failed"}.get(r["status"], r["status"])


def one(R, name):
    if name is None:
        return "not run"
    r = R.get(name)
    if r["status"] == "done":
        return f3(r["eval_acc"])
    return state_word(r)


def seeds_cell(R, rows):
    rs = [R.get(p["name"]) for p in rows]
    vals = [r["eval_acc"] if r["status"] == "done" else None for r in rs]
    return cell(rs, vals, len(rows))


def write_tables(R):
    L = []
    devices = sorted({R.get(p["name"])["device"] for p in R.plan if p["lr"] != "best" and R.get(p["name"])["device"]})
    all_names = list(dict.fromkeys(p["name"] for p in R.plan))  # in the plan's order
    L.append("# The paper's MQAR experiments, rerun with vla-train")
    L.append("")
    L.append("TinyLM as the paper's code trains it (docs/TRAINER.md: d 128, 4 heads of 32, 2 blocks, FFN 256,")
    L.append("V 128), batch 64, a fresh batch every step, AdamW, learning rate 3e-4 with warm-up over the first")
    L.append("tenth and a cosine to 0 (the zoology sweep: other peak rates), clipping at 1.0, fp32.")
    m = re.search(r"eval_batches=(\d+)", R.settings)
    eb = int(m.group(1)) if m else 20
    ev = "the code's 20 batches of 32 sequences" if eb == 20 else f"{eb} batches of 32 sequences (the code's: 20)"
    L.append(f"**Evaluation: {ev}** (the paper's text says 15 of 64), fresh")
    L.append("batches from the seed's evaluation stream, exact match over the target positions, at the end of")
    L.append("training. mean ± std: over the seeds done, std the population one (ddof 0, numpy's default).")
    L.append(f"Settings: {R.settings or 'not recorded'}. Device: {'; '.join(devices) or 'not recorded'}.")
    L.append("Mechanisms: `deltanet` is the paper's DeltaNet (a gate per head and state row, no write")
    L.append("strength); `delta` the standard DeltaNet (not in the paper: an extra baseline, no paper number).")
    L.append("Cells name a run's state where it has no number: not run, cut at step N, failed (the list at the end says why).")
    if R.settings.startswith("quick"):
        mq = [p for p in R.plan if p["task"] == "mqar" and p["experiment"] in ("table11", "table9")]
        if mq:
            ns = ", ".join(sorted({p["pairs"] for p in mq}, key=int))
            st = ", ".join(sorted({p["steps"] for p in mq}, key=int))
            L.append(f"**A reduced set (reproduce_paper.sh --quick): MQAR n = {ns}, {st} steps, batch 64, not the")
            L.append("paper's setting** (the paper: n = 8 to 48, 1000 steps); chance is about 1/n (an answer among the")
            L.append("n values in the context, without knowing which).")
    L.append("")
    best = {}
    sweep = [p for p in R.plan if p["experiment"] == "zoology-sweep"]
    for m in R.mechs:
        b = R.best_lr(m, sweep)
        if b:
            best[m] = b

    # ---- Table 9
    t9 = R.rows("table9")
    if t9:
        steps = sorted({int(p["steps"]) for p in t9}, reverse=True)
        n = sorted({int(p["pairs"]) for p in t9})
        seeds = sorted({int(p["seed"]) for p in t9}, key=lambda s: (s != 42, s))
        L.append(f"## Table 9: MQAR n = {', '.join(map(str, n))}, seeds {', '.join(map(str, seeds))}")
        L.append("")
        L.append("The paper: n = 24, dh = 32, \"after 2000 steps\" in the text; its code ran 3000. Ours at both.")
        L.append("")
        hdr = "| mechanism | paper (Table 9) |" + "".join(f" ours, {s} steps |" for s in steps)
        hdr += "".join(f" {steps[0]} steps, seed {s} |" for s in seeds)
        L.append(hdr)
        L.append("|---|--:|" + "--:|" * (len(steps) + len(seeds)))
        for m in R.mechs:
            pr = PAPER_T9.get(m)
            row = f"| {LABEL[m]} | {f'{pr[0]:.3f} ± {pr[1]:.3f}' if pr else '-'} |"
            for s in steps:
                row += f" {seeds_cell(R, [p for p in t9 if p['mechanism'] == m and int(p['steps']) == s])} |"
            for sd in seeds:
                rr = [p for p in t9 if p["mechanism"] == m and int(p["steps"]) == steps[0] and int(p["seed"]) == sd]
                row += f" {one(R, rr[0]['name']) if rr else '-'} |"
            L.append(row)
        L.append("")

    # ---- Table 11
    t11 = R.rows("table11")
    if t11 or R.rows("table11-seeds"):
        ns = sorted({int(p["pairs"]) for p in t11})
        steps = sorted({int(p["steps"]) for p in t11})
        L.append("## Table 11: capacity, MQAR n pairs at T = 3n + 1, seed 42")
        L.append("")
        L.append("The paper: seed 42, 1000 steps (its text; the code's schedule is 3000). Cells: ours (paper).")
        for s in steps:
            L.append("")
            L.append(f"{s} steps" + (" (the paper's setting):" if s == 1000 else ":"))
            L.append("")
            L.append("| mechanism |" + "".join(f" n = {n} (T = {3 * n + 1}) |" for n in ns))
            L.append("|---|" + "--:|" * len(ns))
            for m in R.mechs:
                row = f"| {LABEL[m]} |"
                for n in ns:
                    rr = [p for p in t11 if p["mechanism"] == m and int(p["pairs"]) == n and int(p["steps"]) == s]
                    c = one(R, rr[0]["name"]) if rr else "-"
                    if m in PAPER_T11 and n in PAPER_T11_N:
                        c += f" ({PAPER_T11[m][PAPER_T11_N.index(n)]:.3f})"
                    row += f" {c} |"
                L.append(row)
        if any(n not in PAPER_T11_N for n in ns):
            L.append("")
            L.append(f"No paper number at n = {', '.join(str(n) for n in ns if n not in PAPER_T11_N)} "
                     f"(the paper's n: {', '.join(map(str, PAPER_T11_N))}).")
        # evaluated during training (--quick): when each mechanism learns
        for s in steps:
            for n in ns:
                rr = {m: [p for p in t11 if p["mechanism"] == m and int(p["pairs"]) == n and int(p["steps"]) == s]
                      for m in R.mechs}
                curves = {m: R.get(v[0]["name"])["evals"] if v else [] for m, v in rr.items()}
                at = sorted({st for c in curves.values() for st, _ in c})
                if len(at) < 2:
                    continue
                L.append("")
                L.append(f"Evaluation accuracy during training, n = {n}, {s} steps (the same evaluation batches each time):")
                L.append("")
                L.append("| mechanism |" + "".join(f" {st} |" for st in at))
                L.append("|---|" + "--:|" * len(at))
                for m in R.mechs:
                    d = dict(curves[m])
                    L.append(f"| {LABEL[m]} |" + "".join(f" {f3(d[st]) if st in d else '-'} |" for st in at))
        ts = R.rows("table11-seeds")
        if ts:
            ns2 = sorted({int(p["pairs"]) for p in ts})
            st2 = sorted({int(p["steps"]) for p in ts})
            seeds = sorted({int(p["seed"]) for p in ts} | {42})
            L.append("")
            L.append(f"Three seeds ({', '.join(map(str, seeds))}; seed 42's runs are the ones above), mean ± std:")
            L.append("")
            cols = [(n, s) for s in st2 for n in ns2]
            L.append("| mechanism |" + "".join(f" n = {n}, {s} steps |" for n, s in cols))
            L.append("|---|" + "--:|" * len(cols))
            for m in R.mechs:
                row = f"| {LABEL[m]} |"
                for n, s in cols:
                    rr = [p for p in ts if p["mechanism"] == m and int(p["pairs"]) == n and int(p["steps"]) == s]
                    rr += [p for p in t11 if p["mechanism"] == m and int(p["pairs"]) == n and int(p["steps"]) == s]
                    c = seeds_cell(R, rr)
                    if s == 1000 and m in PAPER_T11 and n in PAPER_T11_N:
                        c += f" (paper, seed 42: {PAPER_T11[m][PAPER_T11_N.index(n)]:.3f})"
                    row += f" {c} |"
                L.append(row)
        L.append("")

    # ---- Figure 6
    f6 = R.rows("fig6")
    if f6:
        ts = sorted({int(p["seq_len"]) for p in f6})
        st = sorted({int(p["steps"]) for p in f6})
        L.append(f"## Figure 6: long context, MQAR n = 8, T = {', '.join(map(str, ts))}, seed 42, "
                 f"{', '.join(map(str, st))} steps")
        L.append("")
        L.append("The rest of each sequence after the pairs and the separator is queries. The paper gives a figure,")
        L.append("no table: its values as read from it.")
        L.append("")
        L.append("| mechanism | paper (Figure 6) |" + "".join(f" T = {t} |" for t in ts))
        L.append("|---|---|" + "--:|" * len(ts))
        for m in R.mechs:
            row = f"| {LABEL[m]} | {PAPER_F6.get(m, '-')} |"
            for t in ts:
                rr = [p for p in f6 if p["mechanism"] == m and int(p["seq_len"]) == t]
                row += f" {one(R, rr[0]['name']) if rr else '-'} |"
            L.append(row)
        L.append("")

    # ---- Copy
    cp = R.rows("copy")
    if cp:
        L.append("## Copy: the paper's copy-paper and the real copy task, seed 42")
        L.append("")
        tasks = [t for t in ("copy-paper", "copy") if any(p["task"] == t for p in cp)]
        desc = []
        for t in tasks:
            p0 = [p for p in cp if p["task"] == t][0]
            ev = (f"evaluated every {p0['eval_every']} steps" if int(p0["eval_every"] or 0) > 0
                  else "evaluated at the end only")
            desc.append(f"`{t}` at T = {p0['seq_len']}, {p0['steps']} steps, {ev}")
        L.append("Chosen: " + "; ".join(desc) + ". The paper: " + PAPER_COPY + ".")
        L.append("`copy-paper` scores each position of the copy against its own input token (the identity map:")
        L.append("no attention needed); `copy` asks for the next token, the prefix again (a real copy).")
        L.append("\"first ≥ 0.99\": the first evaluation at or above 0.99 (step).")
        L.append("")
        L.append("| mechanism |" + "".join(f" {t}: accuracy | {t}: first ≥ 0.99 |" for t in tasks) + " paper |")
        L.append("|---|" + "--:|--:|" * len(tasks) + "---|")
        for m in R.mechs:
            row = f"| {LABEL[m]} |"
            for t in tasks:
                rr = [p for p in cp if p["mechanism"] == m and p["task"] == t]
                if not rr:
                    row += " - | - |"
                    continue
                r = R.get(rr[0]["name"])
                row += f" {one(R, rr[0]['name'])} | {r['first99'] if r['first99'] is not None else '-'} |"
            row += f" {'100% by about step 150' if m != 'delta' else '-'} |"
            L.append(row)
        L.append("")

    # ---- Zoology
    zs = R.rows("zoology-sweep")
    zd = R.rows("zoology-seeds")
    if zs:
        lrs = sorted({p["lr"] for p in zs}, key=float)
        p0 = zs[0]
        L.append(f"## MQAR, Zoology's task: mqar-zoology n = {p0['pairs']} at T = {p0['seq_len']}, {p0['steps']} steps")
        L.append("")
        L.append(f"n = {p0['pairs']}: Table 9's number of pairs, with filler between the queries (T = {p0['seq_len']} leaves room")
        L.append("for it beyond the 4n that pairs and queries take). Keys and values from separate halves of the")
        L.append("vocabulary, every key queried once, the answer the next token (Arora et al., 2023). The paper did")
        L.append("not run it: no paper column. Learning rates swept at seed 42; the best rate (highest accuracy,")
        L.append("then lowest final loss) then also at the other seeds; mean ± std over the seeds at that rate.")
        L.append("")
        seeds = sorted({int(p["seed"]) for p in zd} | {42})
        L.append("| mechanism |" + "".join(f" lr {lr}, seed 42 |" for lr in lrs)
                 + f" best lr | best lr, seeds {', '.join(map(str, seeds))} |")
        L.append("|---|" + "--:|" * len(lrs) + "--:|--:|")
        for m in R.mechs:
            row = f"| {LABEL[m]} |"
            for lr in lrs:
                rr = [p for p in zs if p["mechanism"] == m and p["lr"] == lr]
                row += f" {one(R, rr[0]['name']) if rr else '-'} |"
            b = best.get(m)
            if b is None:
                row += " - | not run |"
            else:
                bn = [p["name"] for p in zs if p["mechanism"] == m and p["lr"] == b]
                bn += [R.resolve(p, best) for p in zd if p["mechanism"] == m]
                rs = [R.get(nm) for nm in bn]
                vals = [r["eval_acc"] if r["status"] == "done" else None for r in rs]
                row += f" {b} | {cell(rs, vals, len(bn))} |"
            L.append(row)
        L.append("")

    # ---- Stability
    groups = []
    if t9:
        for s in sorted({int(p["steps"]) for p in t9}, reverse=True):
            groups.append((f"Table 9, n = {t9[0]['pairs']}, {s} steps (mean over seeds)",
                           lambda m, s=s: [p["name"] for p in t9 if p["mechanism"] == m and int(p["steps"]) == s]))
    if t11:
        for s in sorted({int(p["steps"]) for p in t11}):
            for n in sorted({int(p["pairs"]) for p in t11}):
                groups.append((f"Table 11, n = {n}, {s} steps",
                               lambda m, s=s, n=n: [p["name"] for p in t11 if p["mechanism"] == m
                                                    and int(p["steps"]) == s and int(p["pairs"]) == n]))
    if f6:
        for t in sorted({int(p["seq_len"]) for p in f6}):
            groups.append((f"Figure 6, T = {t}", lambda m, t=t: [p["name"] for p in f6 if p["mechanism"] == m
                                                                   and int(p["seq_len"]) == t]))
    if zs and best:
        groups.append(("zoology, best lr (mean over seeds)",
                       lambda m: ([p["name"] for p in zs if p["mechanism"] == m and p["lr"] == best.get(m)]
                                  + [R.resolve(p, best) for p in zd if p["mechanism"] == m])))
    if groups:
        L.append("## Stability: state norms at the end of training")
        L.append("")
        L.append("On the first evaluation batch after the last step: per layer the mean over the batch and the")
        L.append("heads of ||S_T||_F (and of ||A_T||_F, VLA's second state); a cell gives the mean over the two")
        L.append("layers, the larger layer's in brackets (over seeds: their means). softmax keeps no state (n/a).")
        L.append("")
        L.append("| setting |" + "".join(f" {SHORT[m]} |" for m in R.mechs))
        L.append("|---|" + "---|" * len(R.mechs))
        for title, sel in groups:
            row = f"| {title} |"
            for m in R.mechs:
                rs = [R.get(nm) for nm in sel(m) if nm]
                rs = [r for r in rs if r["status"] == "done"]
                if not rs:
                    all_ = [R.get(nm) for nm in sel(m) if nm]
                    row += f" {cell(all_, [], 1) if all_ else '-'} |"
                    continue
                sm, _, _ = mean_std([r["S_mean"] for r in rs])
                sx, _, _ = mean_std([r["S_max"] for r in rs])
                am, _, _ = mean_std([r["A_mean"] for r in rs])
                ax, _, _ = mean_std([r["A_max"] for r in rs])
                c = "n/a" if sm is None else f"S {fnorm(sm)} ({fnorm(sx)})"
                if am is not None:
                    c += f", A {fnorm(am)} ({fnorm(ax)})"
                row += f" {c} |"
            L.append(row)
        L.append("")

    # ---- the runs not done
    planned = [nm for nm in all_names if not nm.endswith("lrbest")]
    for p in zd:
        nm = R.resolve(p, best)
        if nm and nm not in planned:
            planned.append(nm)
    done = [nm for nm in planned if R.get(nm)["status"] == "done"]
    unresolved = [p["name"] for p in zd if R.resolve(p, best) is None]
    wall = sum(R.get(nm)["wall_s"] or 0 for nm in done)
    L.append("## Runs")
    L.append("")
    L.append(f"{len(done)} of {len(planned) + len(unresolved)} planned runs done ({wall:.0f} s of vla-train wall time "
             f"together); every run's numbers: `results.csv`, its logs: `runs/NAME/`.")
    missing = [nm for nm in planned if nm not in done] + unresolved
    if missing:
        L.append("")
        L.append("Not done:")
        L.append("")
        for nm in missing:
            r = R.get(nm) if not nm.endswith("lrbest") else {"detail": "", "status": "not run (no sweep result)"}
            L.append(f"- `{nm}`: {r['detail'] or r['status']}")
    L.append("")
    return "\n".join(L), planned


def write_results_csv(R, planned, path):
    cols = ["name", "experiments", "task", "mechanism", "pairs", "seq_len", "steps", "seed", "lr", "status",
            "eval_acc", "final_loss", "wall_s", "ms_per_step", "S_norm_mean", "S_norm_max", "A_norm_mean",
            "A_norm_max", "first_eval_ge_0.99"]
    exps = {}
    info = {}
    for p in R.plan:
        exps.setdefault(p["name"], []).append(p["experiment"])
        info[p["name"]] = p
    with open(path + ".tmp", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for nm in planned:
            p = info.get(nm)
            if p is None:  # a zoology seed run at its best rate
                base = [q for q in R.plan if q["name"].endswith("lrbest") and nm.startswith(q["name"][:-6])]
                p = dict(base[0]) if base else {}
                p["lr"] = nm.rsplit("-lr", 1)[1]
                ex = ["zoology-seeds"]
            else:
                ex = exps[nm]
            r = R.get(nm)

            def g(x):
                return "" if x is None else f"{x:.6g}"
            w.writerow([nm, ";".join(ex), p.get("task", ""), p.get("mechanism", ""), p.get("pairs", ""),
                        p.get("seq_len", ""), p.get("steps", ""), p.get("seed", ""), p.get("lr", ""),
                        r["detail"] or r["status"], g(r["eval_acc"]), g(r["final_loss"]), g(r["wall_s"]),
                        g(r["ms_per_step"]), g(r["S_mean"]), g(r["S_max"]), g(r["A_mean"]), g(r["A_max"]),
                        "" if r["first99"] is None else r["first99"]])
    os.replace(path + ".tmp", path)


def write_plot_data(R, pdir):
    os.makedirs(pdir, exist_ok=True)
    files = {}

    def acc(name):
        r = R.get(name)
        return r["eval_acc"] if r["status"] == "done" and r["eval_acc"] is not None else None

    def v(x):
        return "NaN" if x is None else f"{x:.6g}"
    t11 = R.rows("table11")
    if t11 or R.rows("table11-seeds"):
        ns = sorted({int(p["pairs"]) for p in t11})
        steps = sorted({int(p["steps"]) for p in t11})
        hdr = ["n"]
        for m in R.mechs:
            hdr += [f"{m}@{s}" for s in steps] + ([f"{m}@paper"] if m in PAPER_T11 else [])
        lines = ["# " + " ".join(hdr)]
        for n in ns:
            row = [str(n)]
            for m in R.mechs:
                for s in steps:
                    rr = [p for p in t11 if p["mechanism"] == m and int(p["pairs"]) == n and int(p["steps"]) == s]
                    row.append(v(acc(rr[0]["name"]) if rr else None))
                if m in PAPER_T11:
                    row.append(v(PAPER_T11[m][PAPER_T11_N.index(n)] if n in PAPER_T11_N else None))
            lines.append(" ".join(row))
        files["capacity.dat"] = "\n".join(lines) + "\n"
    f6 = R.rows("fig6")
    if f6:
        ts = sorted({int(p["seq_len"]) for p in f6})
        hdr = ["T"]
        for m in R.mechs:
            hdr += [f"{m}@ours", f"{m}@paper"]
        lines = ["# " + " ".join(hdr)]
        for t in ts:
            row = [str(t)]
            for m in R.mechs:
                rr = [p for p in f6 if p["mechanism"] == m and int(p["seq_len"]) == t]
                row += [v(acc(rr[0]["name"]) if rr else None), v(PAPER_F6_VALUE.get(m))]
            lines.append(" ".join(row))
        files["accuracy_vs_T.dat"] = "\n".join(lines) + "\n"
    # loss curves: RUNDIR=LABEL lines for plot_training.sh (relative to RESULTS)

    def runs_file(title, sel):
        out = [f"# {title}"]
        for m in R.mechs:
            nm = sel(m)
            if nm and R.get(nm)["last_step"]:
                out.append(f"runs/{nm}={SHORT[m]}")
        return "\n".join(out) + "\n" if len(out) > 1 else None
    t9 = R.rows("table9")
    if t9:
        s = max(int(p["steps"]) for p in t9)
        n = t9[0]["pairs"]
        files["loss-table9.runs"] = runs_file(
            f"Table 9: MQAR n = {n}, seed 42, {s} steps",
            lambda m: next((p["name"] for p in t9 if p["mechanism"] == m and int(p["steps"]) == s
                            and p["seed"] == "42"), None))
    if t11:
        n = max(int(p["pairs"]) for p in t11)
        s = min(int(p["steps"]) for p in t11)
        files["loss-table11.runs"] = runs_file(
            f"Table 11: MQAR n = {n}, seed 42, {s} steps",
            lambda m: next((p["name"] for p in t11 if p["mechanism"] == m and int(p["steps"]) == s
                            and int(p["pairs"]) == n), None))
    cp = R.rows("copy")
    for t in ("copy", "copy-paper"):
        rr = [p for p in cp if p["task"] == t]
        if rr:
            files[f"loss-{t}.runs"] = runs_file(
                f"{t}, T = {rr[0]['seq_len']}, seed 42",
                lambda m, rr=rr: next((p["name"] for p in rr if p["mechanism"] == m), None))
    zs = R.rows("zoology-sweep")
    if zs:
        best = {m: R.best_lr(m, zs) for m in R.mechs}
        files["loss-zoology.runs"] = runs_file(
            f"mqar-zoology n = {zs[0]['pairs']}, T = {zs[0]['seq_len']}, seed 42, each mechanism's best lr",
            lambda m: next((p["name"] for p in zs if p["mechanism"] == m and p["lr"] == best.get(m)), None))
    for name in os.listdir(pdir):
        if (name.endswith(".dat") or name.endswith(".runs")) and name not in files:
            os.remove(os.path.join(pdir, name))
    for name, text in files.items():
        if text is None:
            p = os.path.join(pdir, name)
            if os.path.exists(p):
                os.remove(p)
            continue
        with open(os.path.join(pdir, name) + ".tmp", "w") as f:
            f.write(text)
        os.replace(os.path.join(pdir, name) + ".tmp", os.path.join(pdir, name))


def write_readme(R, path):
    inv = []
    try:
        with open(os.path.join(R.root, "invocations.txt")) as f:
            inv = [x.rstrip("\n").split("|", 3) for x in f if x.strip()]
    except OSError:
        pass
    devices = sorted({R.get(p["name"])["device"] for p in R.plan if p["lr"] != "best" and R.get(p["name"])["device"]})
    L = ["# The paper's experiments, rerun with vla-train (issue #37)", ""]
    L.append(f"- Device: {'; '.join(devices) or '(to be added)'}")
    commits = sorted({i[1] for i in inv if len(i) == 4})
    L.append(f"- Commit: {', '.join(commits) or '(to be added)'}")
    L.append(f"- Settings: {R.settings or '(to be added)'}")
    if inv:
        L.append("- Commands (repository root), in order:")
        for i in inv:
            if len(i) == 4:
                L.append(f"  - {i[0]} on {i[2]}: `{i[3]}`")
    else:
        L.append("- Command: (to be added)")
    L.append("")
    L.append("The tables: `tables.md` (the paper's numbers beside ours). Every run: `results.csv`;")
    L.append("`runs/NAME/` holds its vla-train logs (train.csv, summary.csv, stdout.txt, stderr.txt,")
    L.append("cmd.txt, exit.txt). `plan.csv`: the planned runs per experiment; `progress.log`: the order they")
    L.append("ran in. Plots (`plots/`, PNG and SVG): capacity (Table 11), accuracy against T (Figure 6), loss")
    L.append("curves; redrawn with `bash benchmarks/reproduce_paper.sh --tables-only THIS-FOLDER`.")
    L.append("")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(L))
    os.replace(path + ".tmp", path)


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        if len(argv) == 2:
            print(__doc__.strip())
            return 0
        print("paper_tables.py: usage: python3 benchmarks/paper_tables.py RESULTS", file=sys.stderr)
        return 2
    root = argv[1]
    if not os.path.isdir(root):
        die(f"'{root}' is not a folder", 2)
    R = Results(root)
    text, planned = write_tables(R)
    path = os.path.join(root, "tables.md")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    write_results_csv(R, planned, os.path.join(root, "results.csv"))
    write_plot_data(R, os.path.join(root, "plots"))
    write_readme(R, os.path.join(root, "README.md"))
    print(f"paper_tables.py: wrote {path}, results.csv, README.md and plots/ data")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
