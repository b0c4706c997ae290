#!/usr/bin/env python3
"""Per-check figures from out/*.cg: raw (limiter + loop) and minus the empty loop.
Scenarios as run.sh names them: live, ..., or live-10000 for a run with COUNTERS_KEYS=10000."""
import os
import sys
N = {"live": 200_000, "deny": 200_000, "hot": 200_000, "hotdeny": 200_000, "insert": 1_000_000}
def tot(path):
    ev = tot_ = None
    for line in open(path):
        if line.startswith("events:"): ev = line.split()[1:]
        if line.startswith("totals:"): tot_ = list(map(int, line.split()[1:]))
    d = dict(zip(ev, tot_))
    return {"Ir": d["Ir"], "Dr": d["Dr"], "Dw": d["Dw"], "D1": d["D1mr"] + d["D1mw"],
            "LL": d["DLmr"] + d["DLmw"], "Bcm": d["Bcm"], "Bim": d.get("Bim",0), "Bc": d["Bc"], "Bi": d.get("Bi",0)}
cols = ["Ir", "Dr", "Dw", "D1", "LL", "Bcm", "Bim"]
for sc in sys.argv[1:] or ["live", "deny", "hot", "hotdeny", "insert"]:
    base, _, keys = sc.partition("-")
    n = int(keys) if base == "insert" and keys else N[base]  # insert: one check per key
    e = tot(f"out/empty-{sc}.cg")
    print(f"\n## {sc} (per check, N={n:,})\n| subject | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    print("| empty loop | " + " | ".join(f"{e[c]/n:.2f}" for c in cols) + " |")
    for s in ["ideal", "tollgate", "tollgate-at", "presized", "governor"]:
        if not os.path.exists(f"out/{s}-{sc}.cg"):
            continue
        t = tot(f"out/{s}-{sc}.cg")
        print(f"| {s} raw | " + " | ".join(f"{t[c]/n:.2f}" for c in cols) + " |")
        print(f"| {s} net | " + " | ".join(f"{(t[c]-e[c])/n:.2f}" for c in cols) + " |")
