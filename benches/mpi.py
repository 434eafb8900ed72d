#!/usr/bin/env python3
"""shadowsync across MPI ranks against the same trainers in one process.

For each R in --ranks (T = --trainers ÷ R trainers per rank), on the same data,
model and hyperparameters, in one run:

* `mpirun -np R shadowsync train --trainers T --sync SYNC` (--sync, shadow-ma) and
  the same with `--sync none` (no dense sync; the table sync runs in both: the
  dense sync's cost is the ratio of the two);
* `shadowsync train --trainers R·T --sync SYNC` in one process.

Every cell runs --repeats times, round the whole grid. Prints one table: total
examples/s (median), the ratio MPI ÷ in-process, the shadow sync's
cost (examples/s with sync ÷ without, target ≥ 0.95), test NE, and the bytes moved
per example across ranks (dense sync, embedding-table sync). Then all-reduce
bandwidth against memcpy bandwidth (examples/allreduce_bandwidth.rs) on 2 ranks.
Runs `./dev mpi-bench`, which builds what it needs.

    python3 benches/mpi.py --shadowsync target/release/shadowsync \\
        --allreduce target/release/examples/allreduce_bandwidth \\
        --train train.tsv --test test.tsv --trainers 4 --ranks 1,2,4
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def train(args, out, ranks, trainers, sync):
    """One run's results (rank 0's, under mpirun); ranks=None: no mpirun."""
    results = os.path.join(out, f"r{ranks}-t{trainers}-{sync}.json")
    command = [args.shadowsync, "train", "--train", args.train, "--test", args.test,
               "--model", args.model, "--table-size", str(args.table_size),
               "--trainers", str(trainers), "--sync", sync, "--eval-every", "0",
               "--results", results]
    if "easgd" in sync:
        command += ["--server-shards", str(args.trainers)]
    return run_train(command + args.train_flags.split(), ranks, results)


def run_train(command, ranks, results):
    """Runs `shadowsync train` (under mpirun on `ranks` ranks unless None) to
    its end, or exits saying how it failed; its results (rank 0's)."""
    if ranks is not None:
        command = MPIRUN + ["-np", str(ranks)] + command
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{run.stdout}\n{run.stderr[-3000:]}")
    with open(results) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shadowsync", required=True)
    p.add_argument("--allreduce", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--trainers", type=int, default=4, help="trainers of the whole job")
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--model", default="lr")
    p.add_argument("--table-size", type=int, default=20000)
    p.add_argument("--sync", default="shadow-ma",
                   help="the algorithm measured (EASGD's centre has one shard per trainer "
                        "of the job, spread over the ranks)")
    p.add_argument("--train-flags", default="",
                   help="more `shadowsync train` flags for every run, e.g. \"--optimizer "
                        "adagrad --lr 0.01 --sparse-optimizer adagrad --sparse-lr 0.01\"")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs per cell, round the whole grid (median examples/s, mean NE)")
    args = p.parse_args()

    layouts = [(r, args.trainers // r) for r in map(int, args.ranks.split(","))
               if args.trainers % r == 0]
    cells = [(None, args.trainers, args.sync)] + [
        (r, t, sync) for r, t in layouts for sync in (args.sync, "none")]
    runs = {cell: [] for cell in cells}
    with tempfile.TemporaryDirectory() as out:
        for repeat in range(args.repeats):  # round the grid: a slow spell hits many cells
            for cell in cells:
                runs[cell].append(train(args, out, *cell))
                print(f"run {repeat + 1}/{args.repeats}: {cell}", file=sys.stderr)

    def rate(cell):
        return statistics.median(r["examples_per_sec"] for r in runs[cell])

    def ne(cell):
        return statistics.mean(r["final_metrics"]["ne"] for r in runs[cell])

    def per_example(cell, figure):
        return statistics.mean(figure(r.get("distributed") or {}) / max(r["cluster"]["examples"], 1)
                               for r in runs[cell])

    local = (None, args.trainers, args.sync)
    rows = []
    for r, t in layouts:
        synced, alone = (r, t, args.sync), (r, t, "none")
        rows.append((r, t, rate(synced), rate(local), rate(alone), ne(synced), ne(local),
                     per_example(synced, lambda d: d.get("dense_bytes_sent", 0)),
                     per_example(synced, lambda d: d.get("sparse_bytes_sent", 0))))
    print(f"# {args.sync}, {args.trainers} trainers in all, {args.model}, one pass over "
          f"{args.train} {args.train_flags}, {args.repeats} runs per cell (median examples/s, mean NE)")
    print("| ranks × trainers | examples/s MPI | in one process | MPI ÷ in-process "
          f"| {args.sync} ÷ none (MPI) | NE MPI | NE in one process "
          "| dense B/example | embeddings B/example |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r, t, mpi, one, none, ne, ne_one, dense, table in rows:
        print(f"| {r} × {t} | {mpi:,.0f} | {one:,.0f} | {mpi / one:.2f} | {mpi / none:.2f} "
              f"| {ne:.4f} | {ne_one:.4f} | {dense:,.2f} | {table:,.0f} |")
    bandwidth = subprocess.run(MPIRUN + ["-np", "2", args.allreduce],
                               capture_output=True, text=True)
    print("\n" + "\n".join(l for l in bandwidth.stdout.splitlines()
                           if l.startswith("allreduce")))


if __name__ == "__main__":
    main()
