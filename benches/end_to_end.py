#!/usr/bin/env python3
"""What the user waits for: shadowsync from launch to results, as trainers grow,
with a straggler, and with the final scoring on one thread or on every core.

Three parts, every run one pass of DLRM (Adagrad, batch 128, one thread per
trainer, `--eval-every 0`) over the same files, each figure the median of
--repeats runs with its range:

* **scale**: 1 trainer (`none`) against N (--trainers, default: the cores) under
  shadow-ma, scoring each replica besides the final model (the default) or the
  final model only (`--no-replica-scores`): launch to results, training
  seconds, examples/s over the training clock and over the wall clock, and the
  speed-ups;
* **scoring**: the N-trainer run scoring its final model and N replicas on one
  thread (`--score-threads 1`, as every run did before) against one per core;
* **stragglers**: S trainers (--straggler-trainers, default 8), trainer 1 slowed
  --slowdown times (a sleep per step, `[[stragglers]]`), against none slowed:
  examples/s and the share kept, for none and shadow-ma dealt shared and
  static, and sync-sgd (static: it steps in lockstep). A sleeping straggler
  lends its core to the others when trainers outnumber cores, which hides what
  it costs: give S no more than the cores (on 2 cores, --straggler-trainers 2;
  shared dealing can then keep (1 + 1/slowdown)/2 at best);
* **slow-rank** (not run by default; shadowsync built with the `mpi` feature):
  a job of 2 ranks (`mpirun`) of S/2 trainers each, every trainer of rank 1
  slowed --slowdown times (its own configuration, one program per rank),
  against none slowed: examples/s and the share kept, for none and shadow-ma,
  chunks dealt by rank 0 to whichever rank asks (shared) or in fixed shares per
  rank (static). Shared dealing can keep (1 + 1/slowdown)/2 at best.

Writes the Markdown tables to --out after a line on the machine, and prints each
figure as it comes, so that a run cut short still reports.

    python3 benches/end_to_end.py --shadowsync target/release/shadowsync \\
        --train train.tsv --test test.tsv --straggler-train small.tsv --out e2e.md
"""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile, time


def run(args, out, name, flags, config=None, ranks=None):
    """One run's results, with its wall seconds as the caller saw them; with
    `ranks` (each rank's configuration), a job of that many ranks under mpirun."""
    results = os.path.join(out, f"{name}.json")
    command = [args.shadowsync, "train", "--model", "dlrm", "--batch-size", "128",
               "--threads", "1", "--eval-every", "0", "--results", results] + flags

    def configured(config, suffix=""):
        if not config:
            return command
        path = os.path.join(out, f"{name}{suffix}.toml")
        with open(path, "w") as f:
            f.write(config)
        return command + ["--config", path]

    if ranks:
        programs = [["-np", "1"] + configured(c, f"-rank-{r}") for r, c in enumerate(ranks)]
        command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
        command += [word for p in programs for word in [":"] + p][1:]
    else:
        command = configured(config)
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{name} failed: {(done.stderr or done.stdout).strip()[-2000:]}")
    with open(results) as f:
        report = json.load(f)
    report["process_seconds"] = wall
    w = report["wall"]
    print(f"{name}: launch to results {w['to_results_seconds']:.1f} s (process {wall:.1f} s), "
          f"training {report['train_seconds']:.1f} s, scoring {w['scoring_seconds']:.1f} s, "
          f"NE {report['final_metrics']['ne']:.4f}", file=sys.stderr, flush=True)
    return report


def repeated(args, out, name, flags, config=None, ranks=None):
    return [run(args, out, f"{name}-{i}", flags, config, ranks) for i in range(args.repeats)]


def spread(values, fmt="{:.1f}"):
    """Median with the range, as text."""
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def median(reports, key):
    return statistics.median(key(r) for r in reports)


def scale(args, out, lines):
    data = ["--train", args.train, "--test", args.test]
    one = repeated(args, out, "scale-1", data + ["--trainers", "1", "--sync", "none"])
    many = repeated(args, out, f"scale-{args.trainers}",
                    data + ["--trainers", str(args.trainers), "--sync", "shadow-ma"])
    final = repeated(args, out, f"scale-{args.trainers}-final-only",
                     data + ["--trainers", str(args.trainers), "--sync", "shadow-ma",
                             "--no-replica-scores"])
    lines += [f"## Scale: 1 against {args.trainers} trainers", "",
              "| trainers | launch to results s | to first batch s | training s | scoring s "
              "| examples/s (training clock) | examples/s (wall) | test NE |",
              "|---|---|---|---|---|---|---|---|"]
    rows = (("1, none", one), (f"{args.trainers}, shadow-ma", many),
            (f"{args.trainers}, shadow-ma, final model only", final))
    for label, reports in rows:
        col = lambda key, fmt="{:.1f}": spread([key(r) for r in reports], fmt)
        lines.append(
            f"| {label} | {col(lambda r: r['wall']['to_results_seconds'])} "
            f"| {col(lambda r: r['wall']['to_first_batch_seconds'])} "
            f"| {col(lambda r: r['train_seconds'])} | {col(lambda r: r['wall']['scoring_seconds'])} "
            f"| {col(lambda r: r['examples_per_sec'], '{:,.0f}')} "
            f"| {col(lambda r: r['wall']['examples_per_sec'], '{:,.0f}')} "
            f"| {col(lambda r: r['final_metrics']['ne'], '{:.4f}')} |")
    to_results = lambda reports: median(reports, lambda r: r["wall"]["to_results_seconds"])
    end_to_end, final_only = to_results(one) / to_results(many), to_results(one) / to_results(final)
    training = median(many, lambda r: r["examples_per_sec"]) / \
        median(one, lambda r: r["examples_per_sec"])
    lines += ["", f"- Launch to results: {args.trainers} trainers are **{end_to_end:.1f}×** faster "
              f"than one scoring every replica too, **{final_only:.1f}×** scoring the final "
              f"model only (target ≥ 8× on 16 cores).",
              f"- Training examples/s: **{training:.1f}×** one trainer's, "
              f"{training / args.trainers:.2f} of {args.trainers}× (target ≥ 0.85).", ""]
    return many


def scoring(args, out, lines, many):
    data = ["--train", args.train, "--test", args.test]
    serial = repeated(args, out, "scoring-1-thread",
                      data + ["--trainers", str(args.trainers), "--sync", "shadow-ma",
                              "--score-threads", "1"])
    seconds = lambda r: r["wall"]["scoring_seconds"]
    ratio = median(many, seconds) / median(serial, seconds)
    lines += [f"## Scoring the final model and {args.trainers} replicas", "",
              "| scoring threads | scoring s |", "|---|---|",
              f"| 1 (as before) | {spread([seconds(r) for r in serial], '{:.2f}')} |",
              f"| one per core | {spread([seconds(r) for r in many], '{:.2f}')} |", "",
              f"- Every core takes **{ratio:.2f}** of one thread's time (target ≤ 0.6 on 2 cores).", ""]


def stragglers(args, out, lines):
    data = ["--train", args.straggler_train or args.train, "--test", args.test,
            "--trainers", str(args.straggler_trainers), "--no-replica-scores"]
    slow = f"[[stragglers]]\ntrainer = 1\nslowdown = {args.slowdown}\n"
    cells = [("none", "shared"), ("none", "static"), ("shadow-ma", "shared"),
             ("shadow-ma", "static"), ("sync-sgd", "static")]
    lines += [f"## {args.straggler_trainers} trainers, trainer 1 slowed {args.slowdown}×", "",
              "| algorithm | dealing | examples/s, none slowed | examples/s, one slowed | kept |",
              "|---|---|---|---|---|"]
    for algorithm, dealing in cells:
        flags = data + ["--sync", algorithm, "--dealing", dealing]
        name = f"straggler-{algorithm}-{dealing}"
        fast = repeated(args, out, f"{name}-none", flags)
        slowed = repeated(args, out, f"{name}-slowed", flags, slow)
        rate = lambda r: r["examples_per_sec"]
        kept = median(slowed, rate) / median(fast, rate)
        lines.append(f"| {algorithm} | {dealing} | {spread([rate(r) for r in fast], '{:,.0f}')} "
                     f"| {spread([rate(r) for r in slowed], '{:,.0f}')} | **{kept:.2f}** |")
        print(f"  kept {kept:.2f}", file=sys.stderr, flush=True)
    best = (args.straggler_trainers - 1 + 1 / args.slowdown) / args.straggler_trainers
    lines += ["", f"Shared dealing can keep at most {best:.2f} here; fixed shares "
              f"{1 / args.slowdown:.2f} (the job waits for the straggler's share).", ""]


def slow_rank(args, out, lines):
    per_rank = max(1, args.straggler_trainers // 2)
    data = ["--train", args.straggler_train or args.train, "--test", args.test,
            "--trainers", str(per_rank), "--no-replica-scores"]
    slow = "".join(f"[[stragglers]]\ntrainer = {t}\nslowdown = {args.slowdown}\n"
                   for t in range(per_rank))
    lines += [f"## 2 ranks of {per_rank} trainers, rank 1 slowed {args.slowdown}×", "",
              "| algorithm | dealing | examples/s, none slowed | examples/s, rank 1 slowed "
              "| rank 0's share, slowed | kept |", "|---|---|---|---|---|---|"]
    for algorithm in ["none", "shadow-ma"]:
        for dealing in ["shared", "static"]:
            flags = data + ["--sync", algorithm, "--dealing", dealing]
            name = f"slow-rank-{algorithm}-{dealing}"
            fast = repeated(args, out, f"{name}-none", flags, ranks=["", ""])
            slowed = repeated(args, out, f"{name}-slowed", flags, ranks=["", slow])
            rate = lambda r: r["examples_per_sec"]
            share = lambda r: r["cluster"]["examples"] / r["examples"]
            kept = median(slowed, rate) / median(fast, rate)
            lines.append(f"| {algorithm} | {dealing} | {spread([rate(r) for r in fast], '{:,.0f}')} "
                         f"| {spread([rate(r) for r in slowed], '{:,.0f}')} "
                         f"| {spread([share(r) for r in slowed], '{:.2f}')} | **{kept:.2f}** |")
            print(f"  kept {kept:.2f}", file=sys.stderr, flush=True)
    best = (1 + 1 / args.slowdown) / 2
    lines += ["", f"Shared dealing can keep at most {best:.2f} here; fixed shares "
              f"{1 / args.slowdown:.2f} (the job waits for the slow rank's half).", ""]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shadowsync", required=True)
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--straggler-train", help="training file of the straggler part (--train)")
    parser.add_argument("--trainers", type=int, default=os.cpu_count())
    parser.add_argument("--straggler-trainers", type=int, default=8)
    parser.add_argument("--slowdown", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parts", default="scale,scoring,stragglers")
    parser.add_argument("--out", help="Markdown file to write")
    args = parser.parse_args()
    parts = args.parts.split(",")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    lines = [f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores ({cpu}); "
             f"{args.repeats} runs a cell, median (range).", ""]
    with tempfile.TemporaryDirectory() as out:
        many = scale(args, out, lines) if "scale" in parts else None
        if "scoring" in parts:
            many = many or repeated(args, out, f"scale-{args.trainers}",
                                    ["--train", args.train, "--test", args.test, "--trainers",
                                     str(args.trainers), "--sync", "shadow-ma"])
            scoring(args, out, lines, many)
        if "stragglers" in parts:
            stragglers(args, out, lines)
        if "slow-rank" in parts:
            slow_rank(args, out, lines)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
