#!/usr/bin/env python3
"""What each MPI rank holds of a large embedding table, sharded and replicated.

A DLRM whose 26 tables have --table-size rows each (2,000,000: 26 × 2,000,000 ×
16 floats = 3.3 GB, Adagrad's sums as much again with --sparse-optimizer adagrad)
trains briefly (--rows synthetic rows, one trainer per rank) in one process and
under `mpirun -np R` for each R in --ranks, with the tables sharded (the default
across processes) and, at the smallest R > 1, replicated. From every rank's results
(`distributed.memory_per_process`) it prints each layout's table bytes per rank
against the whole table ÷ R (target ≤ 1.1) and every rank's peak resident set.
Runs are one after another: each layout's ranks share the machine's memory alone.
Run by `./dev mpi-memory`, which builds what it needs.

    python3 benches/mpi_memory.py --shadowsync target/release/shadowsync \\
        --train train.tsv --test test.tsv --ranks 2,4
"""
import argparse, os, sys, tempfile

from mpi import run_train

GB = 1e9


def train(args, out, ranks, embeddings):
    """One run's results (rank 0's, under mpirun); ranks=None: one process."""
    name = f"r{ranks}-{embeddings}"
    config = os.path.join(out, f"{name}.toml")
    with open(config, "w") as f:
        f.write(f'[train]\nembeddings = "{embeddings}"\n' if ranks else "")
    results = os.path.join(out, f"{name}.json")
    command = [args.shadowsync, "train", "--config", config, "--train", args.train,
               "--test", args.test, "--model", "dlrm", "--table-size", str(args.table_size),
               "--sparse-optimizer", args.sparse_optimizer, "--trainers", "1",
               "--sync", "shadow-ma", "--eval-every", "0", "--results", results]
    print(f"running {name} ...", file=sys.stderr)
    return run_train(command, ranks, results)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shadowsync", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--table-size", type=int, default=2_000_000, help="rows per field")
    p.add_argument("--sparse-optimizer", default="sgd", choices=["sgd", "adagrad"])
    args = p.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]

    layouts = [(None, "local")] + [(r, "sharded") for r in ranks]
    layouts.append((min(r for r in ranks if r > 1), "replicated"))
    with tempfile.TemporaryDirectory() as out:
        runs = {layout: train(args, out, *layout) for layout in layouts}

    whole = runs[(None, "local")]["memory"]["table_bytes"]
    print(f"\nDLRM, 26 tables × {args.table_size:,} rows × 16 floats, sparse "
          f"{args.sparse_optimizer}: the whole table and its optimizer state is "
          f"{whole / GB:.2f} GB\n")
    print("| layout | table bytes per rank (largest) | ÷ (whole ÷ R) | peak RSS per rank | test NE |")
    print("|---|---|---|---|---|")
    for (r, embeddings), report in runs.items():
        memory = (report.get("distributed") or {}).get("memory_per_process") or [report["memory"]]
        largest = max(m["table_bytes"] for m in memory)
        ratio = largest / (whole / (r or 1))
        rss = ", ".join(f"{m['peak_rss_bytes'] / GB:.2f}" for m in memory)
        name = "one process" if r is None else f"{r} ranks, {embeddings}"
        print(f"| {name} | {largest / GB:.3f} GB | {ratio:.3f} | {rss} GB | "
              f"{report['final_metrics']['ne']:.4f} |")


if __name__ == "__main__":
    main()
