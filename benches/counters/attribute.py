#!/usr/bin/env python3
"""(--own: group by the innermost frame outside the Rust standard library instead.)
Attribute callgrind instruction-level costs (run with --dump-instr=yes) to source lines
through their inline chains (addr2line -i): which tollgate/governor line a miss comes from.
Usage: attribute.py out/X.cg N [event ...]"""
import sys, re, subprocess, collections
path, n = sys.argv[1], int(sys.argv[2])
OWN = "--own" in sys.argv
want = [a for a in sys.argv[3:] if a != "--own"] or ["D1mr", "DLmr", "Bcm"]
ev = None; names = {}; cur_ob = None; skip = 0
cost = collections.defaultdict(lambda: collections.Counter())
last = [0, 0]
def nm(kind, v):
    m = re.match(r"\((\d+)\)(?: (.*))?", v)
    if m:
        if m.group(2): names[(kind, m.group(1))] = m.group(2)
        return names.get((kind, m.group(1)), m.group(1))
    return v
def pos(tok, i):
    if tok == "*": return last[i]
    if tok[0] in "+-": return last[i] + int(tok, 0) if not tok.startswith(("+0x","-0x")) else last[i] + int(tok[0] + str(int(tok[1:], 16)))
    return int(tok, 0)
for line in open(path):
    line = line.rstrip("\n")
    if line.startswith("events:"): ev = line.split()[1:]; continue
    if line.startswith("ob="): cur_ob = nm("ob", line[3:]); continue
    if line.startswith(("cob=", "cfi=", "cfl=", "cfn=")): 
        if line.startswith("cob="): nm("ob", line[4:])
        continue
    if line.startswith("calls="): skip = 1; continue
    if not line or not (line[0].isdigit() or line[0] in "+-*"): continue
    toks = line.split()
    a = pos(toks[0], 0); l = pos(toks[1], 1); last[:] = [a, l]
    if skip: skip = 0; continue
    vals = list(map(int, toks[2:]))
    c = cost[(cur_ob, a)]
    for e, v in zip(ev, vals): c[e] += v
# resolve addresses in the main binary
items = [(k, c) for k, c in cost.items() if any(c[e] for e in want + ["Ir"])]
bins = collections.defaultdict(list)
for (ob, a), c in items: bins[ob].append((a, c))
agg = collections.Counter(); aggk = collections.defaultdict(collections.Counter)
for ob, lst in bins.items():
    if "counters-bench" not in ob:
        for a, c in lst:
            for e in want: aggk[f"[{ob.split('/')[-1]}]"][e] += c[e]
        continue
    addrs = "\n".join(hex(a) for a, _ in lst)
    out = subprocess.run(["addr2line", "-i", "-f", "-C", "-a", "-e", ob], input=addrs, capture_output=True, text=True).stdout
    chunks = re.split(r"^(0x[0-9a-f]+)\n", out, flags=re.M)[1:]
    res = {int(chunks[i], 16): chunks[i + 1].strip().split("\n") for i in range(0, len(chunks), 2)}
    for a, c in lst:
        fr = res.get(a, [])
        locs = [fr[j + 1].split("/")[-1] + " " + fr[j][:60] for j in range(0, len(fr) - 1, 2)]
        full = [fr[j + 1] for j in range(0, len(fr) - 1, 2)]
        if "--own" in sys.argv[0:0] or OWN:
            own = next((f for f in full if not f.startswith("/rustc/")), full[-1] if full else "?")
            parts = own.split("/")
            key = "/".join(parts[-3:]) if len(parts) > 2 else own
            for e in want: aggk[key][e] += c[e]
            continue
        # innermost frame outside std/core, plus innermost frame
        proj = [x for x in locs if not x.split()[0].startswith(("atomic.rs", "cmp.rs", "uint_macros", "ptr", "mod.rs (", "non_null"))]
        key = locs[0].split()[0] + "  <-  " + " <- ".join(l.split()[0] for l in locs[1:4])
        for e in want: aggk[key][e] += c[e]
rows = sorted(aggk.items(), key=lambda kv: -sum(kv[1][e] for e in want))
print("per check: " + "  ".join(want))
for k, c in rows[:int(__import__("os").environ.get("ROWS", "25"))]:
    print("  ".join(f"{c[e]/n:6.3f}" for e in want), " ", k)
