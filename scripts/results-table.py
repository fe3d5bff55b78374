#!/usr/bin/env python3
"""The README's table of current results, made from weft-bench --json files kept in docs/results.

    scripts/results-table.py            # prints the table (markdown)
    scripts/results-table.py --check    # exits 1 if README.md's table differs from it
    scripts/results-table.py --write    # replaces README.md's table with it

Every row is one row of a kept file, as weft-bench wrote it: nothing is typed in by hand. A file
holds one weft-bench run (`weft-bench ... --json docs/results/NAME.json`); the table keeps every
row of the fused ops and, of the plain collectives, the sizes in KEPT_BYTES. weft-bench takes its
commit when CMake configures it: configure again (`cmake -S . -B build-cuda`) after committing,
before building the weft-bench whose runs are kept. Ratios are the
baseline's time over weft's (above 1: weft is faster). The table sits in README.md between the two
marker lines below.
"""
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")
README = os.path.join(ROOT, "README.md")
BEGIN, END = "<!-- results-table: begin -->", "<!-- results-table: end -->"
KEPT_BYTES = {16 << 10, 1 << 20, 64 << 20}
ORDER = ["gemv_allreduce", "gemm_alltoall", "embedding_alltoall", "allreduce", "alltoall"]


def size(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def shape(row):
    op = row["op"]
    if op in ("allreduce", "alltoall"):
        return size(row["bytes"]) + (" a rank" if op == "alltoall" else "")
    if op == "gemv_allreduce":
        return f"batch {row['batch']}, n {row['n']}, k {row['k']}"
    if op == "gemm_alltoall":
        return f"{row['tokens']} tokens x k {row['k']} x h {row['h']}"
    if op == "embedding_alltoall":
        return f"{row['tables']} tables, dim {row['dim']}, batch {row['batch']}, pooling {row['pooling']}"
    raise ValueError(f"unknown op {op!r}")


def weft_us(row):
    return row["weft_us"] if "weft_us" in row else row["fused_us"]


BASELINES = {
    "allreduce": "NCCL",
    "alltoall": "NCCL",
    "gemv_allreduce": "cuBLAS GEMV + NCCL",
    "gemm_alltoall": "cuBLAS GEMM + NCCL",
    "embedding_alltoall": "pooling kernel + NCCL",
}


def baseline(row):
    name = BASELINES[row["op"]]
    if row.get("baseline") == "weft":
        name = name.replace("NCCL", "weft's All-to-All")
    elif "NCCL_NET=Socket" in row.get("nccl_env", ""):
        name = name.replace("NCCL", "NCCL socket")
    return name


def where(row):
    """p2p, or the proxy and its back-end ("2x2" where node_ranks splits the host), and the mode."""
    parts = [p.strip() for p in row.get("transport", "auto").split(",")]
    backend = next((p.split()[1] for p in parts if p.startswith("proxy_backend ")), "")
    nodes = next((p.split()[1] for p in parts if p.startswith("node_ranks ")), "")
    if parts[0] == "auto" and not nodes:
        path = "p2p"
    else:
        path = f"proxy {backend}".strip() + (f", nodes of {nodes} ranks" if nodes else "")
    return f"{path}, {'graph' if row['graph'] else 'eager'}"


def wrong(row):
    """Elements weft got wrong (against the float64 reference, or against the baseline)."""
    return row.get("weft_wrong", 0) + max(row.get("differing", 0), 0)


def rows():
    """Every kept row, as (file, row); a row weft got wrong, or one missing a field, is refused."""
    out = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
        name = os.path.basename(path)
        with open(path) as f:
            for i, row in enumerate(json.load(f)):
                try:
                    if row["op"] in ("allreduce", "alltoall") and row["bytes"] not in KEPT_BYTES:
                        continue
                    # Every field the table reads: a KeyError names the one missing.
                    _ = (shape(row), weft_us(row), row["baseline_us"], row["gpu"], row["date"], row["commit"])
                except (KeyError, ValueError) as e:
                    sys.exit(f"results-table: {name}, row {i}: no {e} (not a weft-bench --json row?)")
                if wrong(row):
                    sys.exit(f"results-table: {name}, row {i}: weft's result was wrong ({wrong(row)} elements)")
                out.append((name, row))
    # The fused ops first, then the collectives; within an op, p2p before the proxy.
    out.sort(key=lambda fr: (ORDER.index(fr[1]["op"]), fr[1].get("transport", "auto") != "auto"))
    return out


def table():
    lines = [
        "| op | shape | ranks x GPU | path | weft (us) | baseline (us) | baseline / weft | date, commit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, r in rows():
        w, b = weft_us(r), r["baseline_us"]
        lines.append(
            f"| {r['op']} | {shape(r)} | {r['ranks']} x {r['gpu'].replace('NVIDIA ', '')} | {where(r)} "
            f"| {w:.1f} | {b:.1f} ({baseline(r)}) | {b / w:.2f}x | {r['date']}, {r['commit']} |"
        )
    return "\n".join(lines) + "\n"


def readme_parts():
    with open(README) as f:
        text = f.read()
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        sys.exit(f"results-table: README.md needs one '{BEGIN}' and one '{END}' line")
    head, rest = text.split(BEGIN + "\n", 1)
    current, tail = rest.split(END, 1)
    return head, current, tail


def main(argv):
    made = table()
    if argv == ["--check"]:
        _, current, _ = readme_parts()
        if current != made:
            sys.stderr.write("results-table: README.md's table differs from docs/results (scripts/results-table.py --write)\n")
            return 1
        print(f"results-table: README.md's table matches docs/results ({len(rows())} rows)")
        return 0
    if argv == ["--write"]:
        head, _, tail = readme_parts()
        with open(README, "w") as f:
            f.write(head + BEGIN + "\n" + made + END + tail)
        return 0
    if argv:
        sys.exit(__doc__)
    sys.stdout.write(made)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
