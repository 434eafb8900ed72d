#!/usr/bin/env python3
"""shadowsync side by side with what a PyTorch user would run instead.

For each N in --trainers, on the same Criteo-format files, the same model (DLRM),
the same optimizers (Adagrad, dense and sparse learning rates), one intra-op thread
per trainer and one pass over the data split between N trainers (trainer r takes
every N-th batch from the r-th), in one run:

* shadowsync:        `shadowsync train --sync SYNC` (N trainer threads, one process,
                     one embedding table shared Hogwild-style, dense replicas
                     averaged in the background);
* PyTorch Hogwild:   N processes (torch.multiprocessing), the embedding tables and
                     their Adagrad sums in shared memory, updated without locks;
                     each process its own dense replica, the replicas averaged
                     through shared memory every --period steps (the peer a PyTorch
                     user picks for this job on one machine);
* PyTorch DDP:       N processes (gloo backend), gradients all-reduced every step;
* PyTorch local SGD: N processes, every --period steps all parameters averaged
                     with an all-reduce (periodic model averaging, as
                     torch.distributed.algorithms.model_averaging does).

Each N runs at two batch settings: the same batch per trainer (--batch-size each,
the global batch grows with N) and the same global batch (--batch-size split
between the N trainers). Every cell runs --runs times (seeds --seed, --seed + 1,
…), the four systems one after another within a run; the table prints each
system's median examples/s with its range, the median of the per-run ratios
shadowsync ÷ peer, and the median test NE. Models with replicas are scored on
the replicas' average. Needs `torch`; without it, says so and exits 0 (skipped).

    python3 benches/pytorch_peers.py --shadowsync target/release/shadowsync \
        --train train.tsv --test test.tsv --trainers 1,2,4 --runs 3

With --plain-hogwild it instead compares plain Hogwild under plain SGD (DLRM's
reference optimizer, --plain-lr for dense and rows), as PyTorch's Hogwild example
does it: one DLRM in shared memory (`model.share_memory()`), N processes, each
training `torch.optim.SGD` on rows rank::N, one thread each; against shadowsync's
one trainer of N Hogwild workers (`--trainers 1 --workers N --optim-preset
dlrm-reference`). Every N runs --runs seeds of each; the table gives each side's
mean test NE ± its standard deviation, the difference with Welch's p, and the
examples/s with their ratio. With --plain-init shadowsync, PyTorch's model starts
from shadowsync's initial parameters at the same seed (read from the checkpoint of
a run that changes nothing), so that only the training differs; a paired test
follows the table. With --plain-rows first-come, both sides deal every batch to
whichever worker asks first (shadowsync's `--dealing shared`) instead of in fixed
shares.
"""
import argparse, glob, json, os, statistics, subprocess, sys, tempfile, time, warnings

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from scipy.stats import ttest_ind, ttest_rel  # Welch's test; a paired one
except ImportError as e:  # the comparison needs torch; the rest of the suite does not
    print(f"PyTorch peers skipped: {e} (run scripts/setup.sh --with-torch)")
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The same model, parsing and metrics as the single-trainer reference.
from pytorch_reference import DLRM, evaluate, load  # noqa: E402

SYSTEMS = ["shadowsync", "hogwild", "ddp", "local_sgd"]


def split(n, rank, batch, data):
    """Trainer `rank`'s batches: every n-th one from the rank-th."""
    dense, sparse, labels = data
    return [(dense[i:i + batch], sparse[i:i + batch], labels[i:i + batch])
            for i in range(rank * batch, labels.shape[0], n * batch)]


def common_steps(n, batch, data):
    """Steps every trainer takes (the fewest any has: the last trainer's):
    collectives and barriers pair by count."""
    return len(range((n - 1) * batch, data[2].shape[0], n * batch))


def new_model(args, seed):
    torch.manual_seed(seed)  # every replica starts from the same parameters
    return DLRM(args.table_size, 16, [512, 256, 64], [512, 256])


def dense_params(model):
    return [p for name, p in model.named_parameters() if "tables" not in name]


def table_params(model):
    return [p for name, p in model.named_parameters() if "tables" in name]


def optimizers(model, args):
    """Adagrad on the dense parameters and (sparse) on the embedding tables."""
    return [torch.optim.Adagrad(dense_params(model), lr=args.dense_lr),
            torch.optim.Adagrad(table_params(model), lr=args.sparse_lr)]


def worker(rank, n, mode, setting, args, sets, init, out):
    """A DDP or local-SGD process; rank 0 writes the job's figures to `out`."""
    batch, seed = setting
    data, test = sets
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    batches = split(n, rank, batch, data)[:common_steps(n, batch, data)]
    model = new_model(args, seed)
    net = DistributedDataParallel(model) if mode == "ddp" and n > 1 else model
    opts = optimizers(model, args)
    loss_fn = nn.BCEWithLogitsLoss()
    dist.barrier()
    start = time.perf_counter()
    for step, (d, s, y) in enumerate(batches):
        for opt in opts:
            opt.zero_grad()
        loss_fn(net(d, s), y).backward()
        # DDP's all-reduced sparse gradients come uncoalesced; sparse Adagrad
        # on them corrupts memory (malloc aborts): coalesce first.
        for t in model.tables:
            if t.weight.grad is not None and t.weight.grad.is_sparse:
                t.weight.grad = t.weight.grad.coalesce()
        for opt in opts:
            opt.step()
        if mode == "local-sgd" and n > 1 and (step + 1) % args.period == 0:
            with torch.no_grad():
                for p in model.parameters():
                    dist.all_reduce(p.data)
                    p.data /= n
    examples = torch.tensor([sum(int(y.shape[0]) for _, _, y in batches)])
    dist.all_reduce(examples)
    seconds = time.perf_counter() - start
    if mode == "local-sgd" and n > 1:  # the model evaluated: the replicas' average
        with torch.no_grad():
            for p in model.parameters():
                dist.all_reduce(p.data)
                p.data /= n
    if rank == 0:
        result = {"examples": int(examples), "seconds": seconds,
                  "examples_per_sec": int(examples) / seconds}
        result.update(evaluate(model, test))
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


def distributed(mode, n, setting, args, sets, attempts=3):
    """A DDP or local-SGD job, its processes forked with the parsed `sets`
    (train, test). gloo's sparse all-reduce sometimes corrupts the heap
    (`malloc(): unaligned tcache chunk`, SIGABRT) even with the gradients
    coalesced: such a job is run again, and said."""
    for attempt in range(1, attempts + 1):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "result.json")
            init = "file://" + os.path.join(tmp, "rendezvous")
            try:
                mp.start_processes(worker, args=(n, mode, setting, args, sets, init, out),
                                   nprocs=n, join=True, start_method="fork")
            except mp.ProcessExitedException as e:
                print(f"{mode} at N={n} crashed ({e}), attempt {attempt} of {attempts}",
                      flush=True)
                if attempt == attempts:
                    raise
                continue
            with open(out) as f:
                return json.load(f)


def run_processes(context, target, each_args):
    """Runs `target` in a process per tuple of `each_args`, all at once, and
    waits for them; an error if one failed."""
    processes = [context.Process(target=target, args=args) for args in each_args]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a Hogwild process failed (exit code {p.exitcode})")


def hogwild_worker(rank, n, model, sparse_opt, shared, args, batches):
    """A Hogwild process: the shared tables, its own dense replica."""
    slots, barrier, times = shared
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    torch.set_num_threads(1)
    dense = dense_params(model)
    for p in dense:  # shared by the parent: this process's own copy from here
        p.data = p.data.clone()
    dense_opt = torch.optim.Adagrad(dense, lr=args.dense_lr)
    offsets = [0]
    for p in dense:
        offsets.append(offsets[-1] + p.numel())

    def average():
        with torch.no_grad():
            for p, a, b in zip(dense, offsets, offsets[1:]):
                slots[rank, a:b] = p.data.view(-1)
            barrier.wait()
            mean = slots.mean(0)
            barrier.wait()  # everyone has read before anyone writes again
            for p, a, b in zip(dense, offsets, offsets[1:]):
                p.data.copy_(mean[a:b].view_as(p))

    loss_fn = nn.BCEWithLogitsLoss()
    barrier.wait()
    times[rank, 0] = time.perf_counter()
    for step, (d, s, y) in enumerate(batches):
        dense_opt.zero_grad()
        sparse_opt.zero_grad()
        loss_fn(model(d, s), y).backward()
        dense_opt.step()
        sparse_opt.step()
        if n > 1 and (step + 1) % args.period == 0:
            average()
    times[rank, 1] = time.perf_counter()
    average()  # the model scored: the replicas' average


def hogwild(n, setting, args, data, test):
    """N processes sharing the embedding tables and their Adagrad sums."""
    batch, seed = setting
    model = new_model(args, seed)
    model.share_memory()
    sparse_opt = torch.optim.Adagrad(table_params(model), lr=args.sparse_lr)
    sparse_opt.share_memory()
    width = sum(p.numel() for p in dense_params(model))
    context = mp.get_context("fork")  # the children inherit the parsed data
    shared = (torch.zeros(n, width).share_memory_(), context.Barrier(n),
              torch.zeros(n, 2, dtype=torch.float64).share_memory_())
    steps = common_steps(n, batch, data)
    run_processes(context, hogwild_worker, [
        (rank, n, model, sparse_opt, shared, args, split(n, rank, batch, data)[:steps])
        for rank in range(n)])
    slots, _, times = shared
    seconds = float(times[:, 1].max() - times[:, 0].min())
    with torch.no_grad():  # every process left its final replica in its slot
        mean = slots.mean(0)
        offset = 0
        for p in dense_params(model):
            p.data.copy_(mean[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
    examples = steps * n * batch if steps else 0
    result = {"examples": examples, "seconds": seconds, "examples_per_sec": examples / seconds}
    result.update(evaluate(model, test))
    return result


def plain_hogwild_worker(rank, model, lr, batches, times, counter=None):
    """A process of plain Hogwild: every parameter shared, SGD applied in place.
    With a `counter`, `batches` are everyone's, dealt first come (`first_come`)."""
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    torch.set_num_threads(1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.BCEWithLogitsLoss()
    times[rank, 0] = time.perf_counter()
    for d, s, y in (batches if counter is None else first_come(batches, counter)):
        opt.zero_grad()
        loss_fn(model(d, s), y).backward()
        opt.step()
    times[rank, 1] = time.perf_counter()


def first_come(batches, counter):
    """The batches of one list, each to whichever process asks first (a shared
    counter under its lock): shadowsync's `--dealing shared`."""
    while True:
        with counter.get_lock():
            i = counter.value
            counter.value += 1
        if i >= len(batches):
            return
        yield batches[i]


def shadowsync_initial_model(n, seed, args):
    """A DLRM holding the parameters shadowsync's trainer of `n` workers starts
    from at `seed`: a run of one step at a learning rate of 1e-30 (no change an
    f32 holds) checkpoints them, and its safetensors file is read as it is laid
    out (the dense buffer: the variables in name order; the table: field f's
    rows from f × table size)."""
    model = new_model(args, seed)  # its own draw, overwritten below
    with tempfile.TemporaryDirectory() as tmp:
        rows = os.path.join(tmp, "rows.tsv")
        with open(args.train, "rb") as src, open(rows, "wb") as dst:
            dst.writelines(line for _, line in zip(range(args.batch_size), src))
        checkpoints = os.path.join(tmp, "checkpoints")
        run_shadowsync(args, ["--optim-preset", "dlrm-reference", "--lr", "1e-30",
                              "--sparse-lr", "1e-30", "--trainers", "1", "--workers", str(n),
                              "--seed", str(seed), "--checkpoint-dir", checkpoints],
                       train=rows)
        [state] = glob.glob(os.path.join(checkpoints, "ckpt-*", "state.safetensors"))
        arrays = read_safetensors(state)
    dense = torch.from_numpy(arrays["dense/0"])
    with torch.no_grad():
        offset = 0
        for _, p in sorted(named_dense(model)):
            p.copy_(dense[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        assert offset == dense.numel(), f"{offset} dense values against {dense.numel()}"
        table = torch.from_numpy(arrays["table/weight"]).view(26, args.table_size, -1)
        for field, t in enumerate(model.tables):
            t.weight.copy_(table[field])
    return model


def named_dense(model):
    """The dense parameters under shadowsync's names (`bottom/layer0/weight`),
    which sort as its flat buffer lays them out."""
    for mlp in ("bottom", "top"):
        linear = [m for m in getattr(model, mlp) if isinstance(m, nn.Linear)]
        for i, layer in enumerate(linear):
            yield f"{mlp}/layer{i}/bias", layer.bias
            yield f"{mlp}/layer{i}/weight", layer.weight


def read_safetensors(path):
    """The f32 arrays of a safetensors file, by name."""
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_len))
        body = f.read()
    arrays = {}
    for name, info in header.items():
        if name != "__metadata__":
            begin, end = info["data_offsets"]
            values = np.frombuffer(body[begin:end], dtype=np.float32)
            arrays[name] = values.reshape(info["shape"]).copy()
    return arrays


def plain_hogwild(n, seed, args, data, test):
    """PyTorch's Hogwild idiom: one shared model, N processes on rows rank::N."""
    model = (shadowsync_initial_model(n, seed, args) if args.plain_init == "shadowsync"
             else new_model(args, seed))
    model.share_memory()
    times = torch.zeros(n, 2, dtype=torch.float64).share_memory_()
    dense, sparse, labels = data
    b = args.batch_size
    context = mp.get_context("fork")  # the children inherit the parsed data
    counter = None
    if args.plain_rows == "interleaved":
        shards = [(dense[r::n], sparse[r::n], labels[r::n]) for r in range(n)]
        work = [[(d[i:i + b], s[i:i + b], y[i:i + b]) for i in range(0, y.shape[0], b)]
                for d, s, y in shards]
    elif args.plain_rows == "batches":  # consecutive rows, dealt in turn (shadowsync's static)
        work = [split(n, rank, b, data) for rank in range(n)]
    else:  # first come: every process takes the next batch of one list
        work = [split(1, 0, b, data)] * n
        counter = context.Value("q", 0)
    run_processes(context, plain_hogwild_worker, [
        (rank, model, args.plain_lr, batches, times, counter)
        for rank, batches in enumerate(work)])
    seconds = float(times[:, 1].max() - times[:, 0].min())
    result = {"examples_per_sec": labels.shape[0] / seconds}
    result.update(evaluate(model, test))
    return result


def shadowsync_hogwild(n, seed, args):
    """shadowsync's one trainer of N Hogwild workers under plain SGD."""
    lr = str(args.plain_lr)
    dealing = "shared" if args.plain_rows == "first-come" else "static"
    return run_shadowsync(args, ["--optim-preset", "dlrm-reference", "--lr", lr,
                                 "--sparse-lr", lr, "--batch-size", str(args.batch_size),
                                 "--trainers", "1", "--workers", str(n), "--seed", str(seed),
                                 "--dealing", dealing, "--no-replica-scores"])


def run_shadowsync(args, flags, train=None):
    """`shadowsync train` of DLRM on the files (or `train` rows) with `flags`:
    its examples/s, test NE, AUC and calibration."""
    with tempfile.TemporaryDirectory() as tmp:
        results = os.path.join(tmp, "results.json")
        command = [args.shadowsync, "train", "--train", train or args.train, "--test", args.test,
                   "--model", "dlrm", "--table-size", str(args.table_size),
                   "--eval-every", "0", "--results", results] + flags
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, RUST_LOG="warn"))
        with open(results) as f:
            report = json.load(f)
        metrics = report["final_metrics"]
        return {"examples_per_sec": report["examples_per_sec"], "ne": metrics["ne"],
                "auc": metrics["auc"], "calibration": metrics["calibration"]}


def compare_plain_hogwild(args, data, test):
    """The --plain-hogwild comparison: its runs, then its table."""
    cells = []
    for n in [int(x) for x in args.trainers.split(",")]:
        runs = []
        for r in range(args.runs):
            run = {"shadowsync": shadowsync_hogwild(n, args.seed + r, args),
                   "pytorch": plain_hogwild(n, args.seed + r, args, data, test)}
            runs.append(run)
            print(f"N={n}, seed {args.seed + r}: " + "; ".join(
                f"{k} {v['examples_per_sec']:.0f}/s NE {v['ne']:.4f} AUC {v['auc']:.4f} "
                f"calibration {v['calibration']:.3f}" for k, v in run.items()), flush=True)
        cells.append({"workers": n, "runs": runs})
    print(f"\nplain Hogwild under SGD {args.plain_lr}, DLRM, batch {args.batch_size} per "
          f"worker, PyTorch's rows {args.plain_rows}, its initial parameters "
          f"{args.plain_init}'s: shadowsync 1 trainer × N workers against PyTorch "
          f"{torch.__version__}, "
          f"N processes sharing one model; {args.runs} seeds each, mean ± sd")
    print("| N | NE shadowsync | NE PyTorch | difference | Welch p | ex/s shadowsync "
          "| ex/s PyTorch | ÷ PyTorch |")
    print("|" + "---|" * 8)
    for c in cells:
        ne = {k: [r[k]["ne"] for r in c["runs"]] for k in ("shadowsync", "pytorch")}
        speed = {k: [r[k]["examples_per_sec"] for r in c["runs"]]
                 for k in ("shadowsync", "pytorch")}
        sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
        p = (ttest_ind(ne["shadowsync"], ne["pytorch"], equal_var=False).pvalue
             if args.runs > 1 else float("nan"))
        print(f"| {c['workers']} | "
              + " | ".join(f"{statistics.mean(ne[k]):.4f} ± {sd(ne[k]):.4f}" for k in ne)
              + f" | {statistics.mean(ne['shadowsync']) - statistics.mean(ne['pytorch']):+.4f}"
              + f" | {p:.3f} | "
              + " | ".join(f"{statistics.mean(speed[k]):.0f}" for k in speed)
              + f" | {statistics.mean(speed['shadowsync']) / statistics.mean(speed['pytorch']):.2f} |")
    if args.plain_init == "shadowsync" and args.runs > 1:
        print("Both sides start from the same parameters at each seed; the paired test "
              "of the differences, per N: " + ", ".join(
                  f"N = {c['workers']}: p {paired_p(c['runs']):.3f}" for c in cells))
    return cells


def paired_p(runs):
    """The paired t-test's p of shadowsync's NE against PyTorch's, seed by seed."""
    return ttest_rel([r["shadowsync"]["ne"] for r in runs],
                     [r["pytorch"]["ne"] for r in runs]).pvalue


def shadowsync(n, setting, args):
    batch, seed = setting
    return run_shadowsync(args, ["--optimizer", "adagrad", "--lr", str(args.dense_lr),
                                 "--sparse-optimizer", "adagrad", "--sparse-lr",
                                 str(args.sparse_lr), "--batch-size", str(batch),
                                 "--trainers", str(n), "--sync", args.sync,
                                 "--seed", str(seed)])


def spread(values, digits=0):
    """`median [min–max]`."""
    return (f"{statistics.median(values):.{digits}f} "
            f"[{min(values):.{digits}f}–{max(values):.{digits}f}]")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shadowsync", required=True, help="the shadowsync binary")
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--trainers", default="1,2,4")
    ap.add_argument("--runs", type=int, default=3, help="runs per cell")
    ap.add_argument("--sync", default="shadow-ma", help="shadowsync's algorithm")
    ap.add_argument("--period", type=int, default=10,
                    help="Hogwild's and local SGD's steps between averages")
    ap.add_argument("--table-size", type=int, default=100_000)
    ap.add_argument("--batch-size", type=int, default=128,
                    help="per trainer, or global at the same global batch")
    ap.add_argument("--dense-lr", type=float, default=0.02)
    ap.add_argument("--sparse-lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write every run's figures to this file")
    ap.add_argument("--plain-hogwild", action="store_true",
                    help="plain Hogwild under SGD against PyTorch's Hogwild idiom instead")
    ap.add_argument("--plain-lr", type=float, default=0.1,
                    help="--plain-hogwild's SGD learning rate, dense and rows (DLRM's 0.1)")
    ap.add_argument("--plain-rows", choices=["interleaved", "batches", "first-come"],
                    default="interleaved",
                    help="--plain-hogwild's PyTorch processes' rows: rank::N (the idiom's), "
                         "batches of consecutive rows dealt in turn (as shadowsync's "
                         "workers' default, static dealing), or each batch to whichever "
                         "process asks first (both sides; shadowsync's --dealing shared)")
    ap.add_argument("--plain-init", choices=["own", "shadowsync"], default="own",
                    help="--plain-hogwild's PyTorch model's initial parameters: its own "
                         "draw at the seed, or shadowsync's at the same seed (read from "
                         "a checkpoint of a run that changes nothing)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    data, test = load(args.train, args.table_size), load(args.test, args.table_size)
    if args.plain_hogwild:
        cells = compare_plain_hogwild(args, data, test)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(cells, f, indent=1)
        return 0
    cells = []
    for n in [int(x) for x in args.trainers.split(",")]:
        batches = {"per trainer": args.batch_size}
        if n > 1:
            batches["global"] = args.batch_size // n
        for setting, batch in batches.items():
            runs = []
            for r in range(args.runs):
                run_setting = (batch, args.seed + r)
                run = {"shadowsync": shadowsync(n, run_setting, args),
                       "hogwild": hogwild(n, run_setting, args, data, test),
                       "ddp": distributed("ddp", n, run_setting, args, (data, test)),
                       "local_sgd": distributed("local-sgd", n, run_setting, args,
                                                (data, test))}
                runs.append(run)
                print(f"N={n}, batch {batch} per trainer, run {r + 1}: " + "; ".join(
                    f"{k} {v['examples_per_sec']:.0f}/s NE {v['ne']:.4f}" for k, v in run.items()),
                    flush=True)
            cells.append({"trainers": n, "same": setting, "batch": batch, "runs": runs})
    print(f"\nshadowsync {args.sync} against PyTorch {torch.__version__}, DLRM, Adagrad, "
          f"averages every {args.period} steps (Hogwild, local SGD), {args.runs} runs per "
          f"cell: median [min–max]")
    print("| N | same batch | per trainer | shadowsync ex/s | Hogwild ex/s | DDP ex/s "
          "| local SGD ex/s | ÷ Hogwild | ÷ DDP | ÷ local SGD | NE shadowsync | NE Hogwild "
          "| NE DDP | NE local SGD |")
    print("|" + "---|" * 14)
    for c in cells:
        ratio = lambda peer: spread([r["shadowsync"]["examples_per_sec"] /
                                     r[peer]["examples_per_sec"] for r in c["runs"]], 2)
        speed = lambda k: spread([r[k]["examples_per_sec"] for r in c["runs"]])
        ne = lambda k: spread([r[k]["ne"] for r in c["runs"]], 4)
        print(f"| {c['trainers']} | {c['same']} | {c['batch']} | "
              + " | ".join(speed(k) for k in SYSTEMS) + " | "
              + " | ".join(ratio(k) for k in SYSTEMS[1:]) + " | "
              + " | ".join(ne(k) for k in SYSTEMS) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(cells, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
