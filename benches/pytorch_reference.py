#!/usr/bin/env python3
"""PyTorch eager reference for shadowsync's training-step benchmark.

Trains the same model as `shadowsync train` (DLRM, Kaggle shape by default) with
PyTorch's ordinary eager loop -- 26 `nn.EmbeddingBag(sparse=True)` tables, SGD or
Adagrad -- on the same Criteo TSV files with the same conventions (DLRM: missing
-> 0, negative -> 0, ln(x+1), hex mod table size) and the same initialization,
one pass, one intra-op thread. Parsing is done before the clock starts. Prints
one JSON line: examples/s and test metrics.

Each optimizer is set up as a PyTorch user would at its fastest: the dense
parameters with `fused=True` (one kernel over all of them), the tables with the
sparse path (`fused` does not take sparse gradients).

`--profile` also times each phase of a step (embedding lookup, bottom MLP,
interaction, top MLP and loss, backward, dense and sparse optimizer); CPU
kernels are synchronous, so a clock between phases measures them.

Runs only where `torch` is importable; `cargo bench --bench train_step` and
`cargo bench --bench step_profile` call it.
"""
import argparse, json, math, sys, time

import numpy as np
import torch
from torch import nn


def load(path, table_size):
    labels, dense, sparse = [], [], []
    with open(path, "rb") as f:
        for line in f:
            fields = line.rstrip(b"\r\n").split(b"\t")
            fields += [b""] * (40 - len(fields))
            labels.append(float(fields[0]))
            dense.append([math.log1p(max(int(x), 0)) if x else 0.0 for x in fields[1:14]])
            sparse.append([int(x, 16) % table_size if x else 0 for x in fields[14:40]])
    return (torch.tensor(dense, dtype=torch.float32),
            torch.tensor(sparse, dtype=torch.int64),
            torch.tensor(labels, dtype=torch.float32))


def mlp(sizes, relu_last):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))  # U(+-1/sqrt(fan_in)), as shadowsync
        if relu_last or i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, table_size, dim, bottom, top):
        super().__init__()
        self.tables = nn.ModuleList()
        for _ in range(26):
            t = nn.EmbeddingBag(table_size, dim, mode="sum", sparse=True)
            bound = math.sqrt(1.0 / table_size)
            nn.init.uniform_(t.weight, -bound, bound)
            self.tables.append(t)
        self.bottom = mlp([13] + bottom + [dim], True)
        n = 27
        li, lj = torch.tril_indices(n, n, -1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)
        self.top = mlp([dim + n * (n - 1) // 2] + top + [1], False)

    def embed(self, sparse):
        offsets = torch.arange(sparse.shape[0], dtype=torch.int64)
        return [t(sparse[:, i].contiguous(), offsets) for i, t in enumerate(self.tables)]

    def interact(self, x, embs):
        t = torch.stack([x] + embs, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return torch.cat([x, z], dim=1)

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        return self.top(self.interact(x, self.embed(sparse))).squeeze(1)


def auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j + 2) / 2.0
        i = j + 1
    pos = y.sum(); neg = len(y) - pos
    return (ranks[y > 0.5].sum() - pos * (pos + 1) / 2) / (pos * neg)


def evaluate(model, test):
    """Test logloss, NE, AUC and calibration (mean prediction over the click
    rate) of `model` on `test` (dense, sparse, labels)."""
    tdense, tsparse, tlabels = test
    with torch.no_grad():
        p = torch.cat([torch.sigmoid(model(tdense[i:i + 8192], tsparse[i:i + 8192]))
                       for i in range(0, tlabels.shape[0], 8192)]).double().numpy()
    y = tlabels.double().numpy()
    pc = np.clip(p, 1e-7, 1 - 1e-7)
    logloss = float(-(y * np.log(pc) + (1 - y) * np.log(1 - pc)).mean())
    ctr = y.mean()
    entropy = -(ctr * math.log(ctr) + (1 - ctr) * math.log(1 - ctr))
    return {"logloss": logloss, "ne": logloss / entropy, "auc": float(auc(p, y)),
            "calibration": float(p.mean() / ctr)}


def optimizers(model, kind, lr, sparse_lr):
    """The dense parameters' optimizer and the tables'."""
    dense = [p for name, p in model.named_parameters() if not name.startswith("tables.")]
    tables = list(model.tables.parameters())
    if kind == "sgd":
        return (torch.optim.SGD(dense, lr=lr, fused=True), torch.optim.SGD(tables, lr=sparse_lr))
    return (torch.optim.Adagrad(dense, lr=lr, fused=True),
            torch.optim.Adagrad(tables, lr=sparse_lr))


PHASES = ["embedding lookup", "bottom MLP", "interaction", "top MLP and loss", "backward",
          "dense optimizer", "sparse optimizer"]


def profiled_step(model, opts, loss_fn, d, s, y, seconds):
    """One step, each phase's time added to `seconds` (a list in PHASES' order)."""
    clock = [time.perf_counter()]

    def lap(i):
        now = time.perf_counter()
        seconds[i] += now - clock[0]
        clock[0] = now

    for opt in opts:
        opt.zero_grad()
    embs = model.embed(s); lap(0)
    x = model.bottom(d); lap(1)
    z = model.interact(x, embs); lap(2)
    loss = loss_fn(model.top(z).squeeze(1), y); lap(3)
    loss.backward(); lap(4)
    opts[0].step(); lap(5)
    opts[1].step(); lap(6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--table-size", type=int, default=100_000)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--optimizer", choices=["sgd", "adagrad"], default="sgd")
    ap.add_argument("--lr", type=float, default=0.1, help="dense learning rate")
    ap.add_argument("--sparse-lr", type=float, default=None,
                    help="embedding learning rate (--lr unless given)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true", help="time each phase of a step")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    dense, sparse, labels = load(args.train, args.table_size)
    test = load(args.test, args.table_size)
    model = DLRM(args.table_size, 16, [512, 256, 64], [512, 256])
    sparse_lr = args.lr if args.sparse_lr is None else args.sparse_lr
    opts = optimizers(model, args.optimizer, args.lr, sparse_lr)
    loss_fn = nn.BCEWithLogitsLoss()
    n = labels.shape[0]
    seconds = [0.0] * len(PHASES)
    start = time.perf_counter()
    for i in range(0, n, args.batch_size):
        d, s, y = dense[i:i + args.batch_size], sparse[i:i + args.batch_size], labels[i:i + args.batch_size]
        if args.profile:
            profiled_step(model, opts, loss_fn, d, s, y, seconds)
            continue
        for opt in opts:
            opt.zero_grad()
        loss = loss_fn(model(d, s), y)
        loss.backward()
        for opt in opts:
            opt.step()
    elapsed = time.perf_counter() - start
    steps = -(-n // args.batch_size)
    result = {"examples": int(n), "train_seconds": elapsed, "examples_per_sec": n / elapsed,
              "optimizer": args.optimizer, "torch": torch.__version__}
    if args.profile:
        result["phase_ms_per_step"] = {p: 1e3 * t / steps for p, t in zip(PHASES, seconds)}
    result.update(evaluate(model, test))
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
