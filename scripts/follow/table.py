#!/usr/bin/env python3
"""Summarise a `prefixring eval` results.json for docs/study.md, "Conversations
that spill": per workload, fleet and load, each policy's spill, follow and hit
rates and TTFTs as ranges over the seeds, and its mean and p99 TTFT over BASE's
per seed (range) and over the seeds' sums (in parentheses).

With --compact, one row a point: BASE's figures, then each other policy's
spill, follow and hit rates and TTFT ratios to BASE (ranges).

usage: table.py [--compact] results.json [BASE]   (BASE: chwbl unless given)"""
import collections
import json
import sys


def rng(xs, f):
    lo, hi = min(xs), max(xs)
    return f % lo if f % lo == f % hi else (f + "–" + f) % (lo, hi)


def main():
    args = sys.argv[1:]
    compact = args[:1] == ["--compact"]
    args = args[1:] if compact else args
    res = json.load(open(args[0]))
    base = args[1] if len(args) > 1 else "chwbl"
    cells = collections.defaultdict(lambda: collections.defaultdict(dict))
    order = []
    for r in res:
        k = (r["workload"].split("/")[-1], r["kv_blocks"], r["rate_scale"])
        cells[k][r["policy"]][r["seed"]] = r
        if r["policy"] not in order:
            order.append(r["policy"])
    if compact:
        return print_compact(cells, order, base)
    print(f"| workload | fleet | load | policy | spill | follow | hit | mean ms | p50 ms | p99 ms | mean × {base} | p99 × {base} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k in sorted(cells):
        b = cells[k][base]
        for p in order:
            rs = cells[k].get(p)
            if not rs:
                continue
            s = sorted(rs)
            col = lambda f: [rs[i][f] for i in s]
            ratio = lambda f: rng([rs[i][f] / b[i][f] for i in s], "%.2f") + " (%.2f)" % (
                sum(col(f)) / sum(b[i][f] for i in s))
            follow = rng([rs[i].get("follow_rate") or 0 for i in s], "%.3f") if "follow" in p else "–"
            fleet = "H100" if k[1] == 0 else f"{k[1]} blk"
            print(f"| {k[0]} | {fleet} | ×{k[2]:g} | {p} | {rng(col('spill_rate'), '%.3f')} | {follow} | "
                  f"{rng(col('hit_rate'), '%.3f')} | {rng(col('ttft_mean_ms'), '%.0f')} | {rng(col('ttft_p50_ms'), '%.0f')} | "
                  f"{rng(col('ttft_p99_ms'), '%.0f')} | {'' if p == base else ratio('ttft_mean_ms')} | "
                  f"{'' if p == base else ratio('ttft_p99_ms')} |")


def print_compact(cells, order, base):
    others = [p for p in order if p != base]
    head = f"| workload | fleet | load | {base} spill | hit | mean / p99 ms |"
    head += "".join(f" {p}: spill / follow | hit | mean × | p99 × |" for p in others)
    print(head)
    print("|---" * (6 + 4 * len(others)) + "|")
    for k in sorted(cells):
        b = cells[k][base]
        s = sorted(b)
        bc = lambda f: [b[i][f] for i in s]
        fleet = "H100" if k[1] == 0 else f"{k[1]} blk"
        row = (f"| {k[0]} | {fleet} | ×{k[2]:g} | {rng(bc('spill_rate'), '%.3f')} | {rng(bc('hit_rate'), '%.3f')} | "
               f"{rng(bc('ttft_mean_ms'), '%.0f')} / {rng(bc('ttft_p99_ms'), '%.0f')} |")
        for p in others:
            rs = cells[k][p]
            row += (f" {rng([rs[i]['spill_rate'] for i in s], '%.3f')} / {rng([rs[i].get('follow_rate') or 0 for i in s], '%.3f')} | {rng([rs[i]['hit_rate'] for i in s], '%.3f')} |"
                    f" {rng([rs[i]['ttft_mean_ms'] / b[i]['ttft_mean_ms'] for i in s], '%.2f')} |"
                    f" {rng([rs[i]['ttft_p99_ms'] / b[i]['ttft_p99_ms'] for i in s], '%.2f')} |")
        print(row)


if __name__ == "__main__":
    main()
