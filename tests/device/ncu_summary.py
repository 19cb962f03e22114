"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log per kernel (name and grid) and prints
the total and the kernels that took the most time. Used by profile_decode.sh and profile_verify.sh.
    python3 ncu_summary.py NCU.csv [TOP] [--by-name]
TOP: how many kernels to list (default 25); --by-name: one line per kernel, all grids together."""
import collections
import csv
import io
import sys

lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
args = [a for a in sys.argv[2:] if a != "--by-name"]
top = int(args[0]) if args else 25
by_name = "--by-name" in sys.argv
rows = list(csv.DictReader(io.StringIO("".join(lines))))
agg = collections.defaultdict(lambda: [0, 0.0])
for r in rows:
    name = r["Kernel Name"].split("(")[0].replace("void ", "")[:64]
    if not by_name:
        name += " " + r["Grid Size"]
    agg[name][0] += 1
    agg[name][1] += float(r["Metric Value"].replace(",", "")) / 1000.0
total = sum(v[1] for v in agg.values())
print("  %d kernels, %.1f us in all" % (len(rows), total))
for k, (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
    print("  %-80s n=%4d  %9.1f us  avg %7.2f" % (k, n, us, us / n))
