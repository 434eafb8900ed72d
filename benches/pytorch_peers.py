#!/usr/bin/env python3
"""shadowsync side by side with what a PyTorch user would run instead.

For each N in --trainers, on the same Criteo-format files, the same model (DLRM),
the same optimizers (Adagrad, dense and sparse learning rates), the same per-trainer
batch and one pass over the data split between N trainers, in one run:

* shadowsync:      `shadowsync train --sync SYNC` (N trainer threads, one process);
* PyTorch DDP:     N processes (gloo backend), gradients all-reduced every step;
* PyTorch local SGD: N processes, every --period steps all parameters averaged
                   with an all-reduce (periodic model averaging, as
                   torch.distributed.algorithms.model_averaging does).

Each trainer uses one intra-op thread. Prints one table: examples/s of all trainers
together and test NE per system, and the ratios shadowsync ÷ peer (examples/s) and the
NE differences. Needs `torch`; without it, says so and exits 0 (skipped).

    python3 benches/pytorch_peers.py --shadowsync target/release/shadowsync \
        --train train.tsv --test test.tsv --trainers 1,2,4
"""
import argparse, json, os, subprocess, sys, tempfile, time, warnings

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
except ImportError as e:  # the comparison needs torch; the rest of the suite does not
    print(f"PyTorch peers skipped: {e} (run scripts/setup.sh --with-torch)")
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The same model, parsing and metrics as the single-trainer reference.
from pytorch_reference import DLRM, evaluate, load  # noqa: E402


def optimizers(model, args):
    """Adagrad on the dense parameters and (sparse) on the embedding tables."""
    tables = [p for name, p in model.named_parameters() if "tables" in name]
    dense = [p for name, p in model.named_parameters() if "tables" not in name]
    return [torch.optim.Adagrad(dense, lr=args.dense_lr),
            torch.optim.Adagrad(tables, lr=args.sparse_lr)]


def worker(rank, n, mode, args, init, out):
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    torch.manual_seed(args.seed)  # every replica starts from the same parameters
    dense, sparse, labels = load(args.train, args.table_size)
    # Rank r takes every n-th batch: the trainers split one pass over the data.
    b = args.batch_size
    batches = [(dense[i:i + b], sparse[i:i + b], labels[i:i + b])
               for i in range(rank * b, labels.shape[0], n * b)]
    model = DLRM(args.table_size, 16, [512, 256, 64], [512, 256])
    net = DistributedDataParallel(model) if mode == "ddp" and n > 1 else model
    opts = optimizers(model, args)
    loss_fn = nn.BCEWithLogitsLoss()
    dist.barrier()
    start = time.perf_counter()
    steps = len(batches)
    # Every rank takes the same number of steps (collectives pair by count).
    counts = torch.tensor([steps])
    dist.all_reduce(counts, op=dist.ReduceOp.MIN)
    for step, (d, s, y) in enumerate(batches[:int(counts)]):
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
    examples = torch.tensor([sum(int(y.shape[0]) for _, _, y in batches[:int(counts)])])
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
        result.update(evaluate(model, load(args.test, args.table_size)))
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


def peer(mode, n, args):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        init = "file://" + os.path.join(tmp, "rendezvous")
        mp.spawn(worker, args=(n, mode, args, init, out), nprocs=n, join=True)
        with open(out) as f:
            return json.load(f)


def shadowsync(n, args):
    with tempfile.TemporaryDirectory() as tmp:
        results = os.path.join(tmp, "results.json")
        command = [args.shadowsync, "train", "--train", args.train, "--test", args.test,
                   "--model", "dlrm", "--optimizer", "adagrad", "--lr", str(args.dense_lr),
                   "--sparse-optimizer", "adagrad", "--sparse-lr", str(args.sparse_lr),
                   "--table-size", str(args.table_size), "--batch-size", str(args.batch_size),
                   "--trainers", str(n), "--sync", args.sync, "--seed", str(args.seed),
                   "--eval-every", "0", "--results", results]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, RUST_LOG="warn"))
        with open(results) as f:
            report = json.load(f)
        return {"examples_per_sec": report["examples_per_sec"],
                "ne": report["final_metrics"]["ne"], "auc": report["final_metrics"]["auc"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shadowsync", required=True, help="the shadowsync binary")
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--trainers", default="1,2,4")
    ap.add_argument("--sync", default="shadow-ma", help="shadowsync's algorithm")
    ap.add_argument("--period", type=int, default=10, help="local SGD's steps between averages")
    ap.add_argument("--table-size", type=int, default=100_000)
    ap.add_argument("--batch-size", type=int, default=128, help="per trainer")
    ap.add_argument("--dense-lr", type=float, default=0.02)
    ap.add_argument("--sparse-lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write every figure to this file")
    args = ap.parse_args()
    rows = []
    for n in [int(x) for x in args.trainers.split(",")]:
        ours = shadowsync(n, args)
        ddp = peer("ddp", n, args)
        local = peer("local-sgd", n, args)
        rows.append({"trainers": n, "shadowsync": ours, "ddp": ddp, "local_sgd": local})
        print(f"N={n}: shadowsync {ours['examples_per_sec']:.0f}/s NE {ours['ne']:.4f}; "
              f"DDP {ddp['examples_per_sec']:.0f}/s NE {ddp['ne']:.4f}; "
              f"local SGD {local['examples_per_sec']:.0f}/s NE {local['ne']:.4f}", flush=True)
    print(f"\nshadowsync {args.sync} against PyTorch {torch.__version__} (gloo), "
          f"DLRM, Adagrad, batch {args.batch_size} per trainer, local SGD every {args.period} steps")
    print("| N | shadowsync ex/s | DDP ex/s | ÷ DDP | local SGD ex/s | ÷ local SGD "
          "| NE shadowsync | NE DDP | Δ | NE local SGD | Δ |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o, d, l = r["shadowsync"], r["ddp"], r["local_sgd"]
        print(f"| {r['trainers']} | {o['examples_per_sec']:.0f} | {d['examples_per_sec']:.0f} "
              f"| {o['examples_per_sec'] / d['examples_per_sec']:.2f} | {l['examples_per_sec']:.0f} "
              f"| {o['examples_per_sec'] / l['examples_per_sec']:.2f} | {o['ne']:.4f} | {d['ne']:.4f} "
              f"| {o['ne'] - d['ne']:+.4f} | {l['ne']:.4f} | {o['ne'] - l['ne']:+.4f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
