#!/usr/bin/env python3
"""shadowsync as trainers and ranks grow: does every run end whole, and what does
each trainer cost?

Two grids, every run one pass over the same synthetic data (`./dev scale` makes
it with `gen-data --profile criteo`: Criteo Kaggle's cardinalities hashed into
small tables, so that hot rows collide as in real logs), each
cell checked for what a run at any scale must do: end with its results, train
every example read (the run fails otherwise), and, with tables sharded over ranks,
apply every pushed gradient once (`distributed.unaccounted_pushes` empty):

* one process: --trainers (1, 16, 17, 64, 256, 1024) trainers of logistic
  regression under shadow-ma (`none` for one trainer), a tiny table;
* across processes: `mpirun -np R` for R in --ranks (1, 2, 4, 8) × T in
  --per-rank (1, 4, 16) trainers per rank, logistic regression and a small DLRM
  (`--dlrm-config`), tables sharded over the ranks.

Per cell: examples/s in all and per trainer, bytes sent per example (embedding
rows, dense sync), sync gap and staleness, pushes sent and applied, peak resident
set per rank, examples/s over the training clock and over the wall clock (rank 0's
launch to results: start-up, data, table, training, scoring), seconds to the first
batch (`wall.to_first_batch_seconds`) and the process's seconds to the end. Writes the markdown table
to --out (docs/results/scale.md) after a preamble on what the machine can show.
Run by `./dev scale`, which builds what it needs.

    python3 benches/scale.py --shadowsync target/release/shadowsync \\
        --train train.tsv --test test.tsv --out docs/results/scale.md
"""
import argparse, datetime, json, os, platform, statistics, subprocess, sys, tempfile, time

from mpi import MPIRUN

DLRM = """[model]
kind = "dlrm"
embedding_dim = 8
[model.dlrm]
bottom_mlp = [32, 8]
top_mlp = [32]
"""


def run(args, out, model, ranks, trainers):
    """One cell's results (rank 0's), with its wall seconds; ranks=None: one
    process without mpirun. A run that fails is reported as failed, not fatal."""
    name = f"{model}-r{ranks}-t{trainers}"
    results = os.path.join(out, f"{name}.json")
    config = os.path.join(out, f"{model}.toml")
    with open(config, "w") as f:
        f.write(DLRM if model == "dlrm" else '[model]\nkind = "lr"\n')
    job_trainers = trainers * (ranks or 1)
    command = [args.shadowsync, "train", "--config", config, "--train", args.train,
               "--test", args.test, "--table-size", str(args.table_size),
               "--trainers", str(trainers), "--batch-size", str(args.batch_size),
               "--sync", "shadow-ma" if job_trainers > 1 else "none",
               "--eval-every", "0", "--results", results]
    if ranks is not None:
        command = MPIRUN + ["-np", str(ranks)] + command
    print(f"running {name} ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0 or not os.path.exists(results):
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"failed": tail[0]}, wall
    with open(results) as f:
        return json.load(f), wall


def row(label, ranks, trainers, report, wall):
    """One table row of a cell."""
    if "failed" in report:
        return f"| {label} | {ranks or 1} × {trainers} | **failed**: {report['failed']} |" + " |" * 10
    job = trainers * (ranks or 1)
    stats = report["cluster"]["trainer_stats"]
    mean = lambda key: statistics.mean(s[key] for s in stats)
    d = report.get("distributed") or {}
    sharded = d.get("sharded") or {}
    sent = sum(sharded.get("pushes_sent", {}).get("pushes", []))
    lost = d.get("unaccounted_pushes", [])
    pushes = f"{sent:,} sent, {'all applied once' if not lost else f'{len(lost)} pairs differ'}" \
        if sharded else "—"
    memory = d.get("memory_per_process") or [report.get("memory", {})]
    peak = max((m.get("peak_rss_bytes") or 0) for m in memory) / 2**20
    rate = report["examples_per_sec"]
    clock = report["wall"]
    return (f"| {label} | {ranks or 1} × {trainers} | {report['examples']:,} "
            f"| {rate:,.0f} | {clock['examples_per_sec']:,.0f} | {rate / job:,.0f} "
            f"| {d.get('sparse_bytes_per_example', 0):,.1f} | {d.get('dense_bytes_per_example', 0):,.1f} "
            f"| {mean('mean_sync_gap'):.1f} / {mean('mean_staleness'):.1f} | {pushes} "
            f"| {peak:,.0f} | {clock['to_first_batch_seconds']:.1f} | {wall:.1f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shadowsync", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--out", required=True, help="the markdown file to write")
    p.add_argument("--trainers", default="1,16,17,64,256,1024",
                   help="trainers of the one-process grid")
    p.add_argument("--ranks", default="1,2,4,8")
    p.add_argument("--per-rank", default="1,4,16", help="trainers per rank")
    p.add_argument("--table-size", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()

    header = ("| model | ranks × trainers | examples | examples/s (training clock) "
              "| examples/s (wall) | per trainer "
              "| rows B/example | dense B/example | sync gap / staleness (steps) "
              "| pushes (rank 0 sent) | peak RSS per rank (MiB) | s to first batch | s to end |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = []
    with tempfile.TemporaryDirectory() as out:
        lines += ["## One process", "", header]
        for t in map(int, args.trainers.split(",")):
            lines.append(row("lr", None, t, *run(args, out, "lr", None, t)))
        lines += ["", "## Across processes (tables sharded over the ranks)", "", header]
        for model in ("lr", "dlrm"):
            for r in map(int, args.ranks.split(",")):
                for t in map(int, args.per_rank.split(",")):
                    lines.append(row(model, r, t, *run(args, out, model, r, t)))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    failed = sum("**failed**" in l for l in lines)
    preamble = f"""# Scale: trainers and ranks, nothing lost

Generated {datetime.date.today()} by `./dev scale` (benches/scale.py) on this machine:
{os.cpu_count()} cores ({cpu}). Every run is one pass over {args.train} (synthetic
rows, `gen-data --profile criteo`: Criteo Kaggle's cardinalities), batches of {args.batch_size}, a table of {args.table_size} rows per field,
shadow-ma (`none` for one trainer). Logistic regression, and a small DLRM
(embeddings of 8, MLPs 32-8 and 32) across processes.

What each cell shows: the run ended with its results; every example read was
trained once (a run that loses or doubles a batch fails); with tables sharded
over ranks, every push was applied exactly once at its owner (pushes sent ==
applied, for every pair of ranks). {failed} of {len([l for l in lines if l.startswith('| lr') or l.startswith('| dlrm')])} cells failed.

What this machine can show: correctness at every size, bytes per example, and
the overhead each trainer or rank adds (start-up, memory, the per-trainer rate
falling as N trainers share {os.cpu_count()} cores). What it cannot show:
speed-up. Beyond {os.cpu_count()} trainers every one runs on a share of a core,
and the ranks of a job share this machine's cores and memory bus, so examples/s
in all stays near what its cores give one trainer. Run `./dev scale` on a machine
with a core per trainer for the speed-up.

"""
    with open(args.out, "w") as f:
        f.write(preamble + "\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    if failed:
        sys.exit(f"{failed} cells failed: see {args.out}")


if __name__ == "__main__":
    main()
