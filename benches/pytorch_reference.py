#!/usr/bin/env python3
"""PyTorch eager reference for shadowsync's training-step benchmark.

Trains the same model as `shadowsync train` (DLRM, Kaggle shape by default) with
PyTorch's ordinary eager loop -- 26 `nn.EmbeddingBag(sparse=True)` tables, plain
SGD -- on the same Criteo TSV files with the same conventions (DLRM: missing -> 0,
negative -> 0, ln(x+1), hex mod table size) and the same initialization, one pass,
one intra-op thread. Parsing is done before the clock starts. Prints one JSON line:
examples/s and test metrics.

Runs only where `torch` is importable; `cargo bench --bench train_step` calls it.
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

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        offsets = torch.arange(sparse.shape[0], dtype=torch.int64)
        embs = [t(sparse[:, i].contiguous(), offsets) for i, t in enumerate(self.tables)]
        t = torch.stack([x] + embs, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([x, z], dim=1)).squeeze(1)


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
    """Test logloss, NE and AUC of `model` on `test` (dense, sparse, labels)."""
    tdense, tsparse, tlabels = test
    with torch.no_grad():
        p = torch.cat([torch.sigmoid(model(tdense[i:i + 8192], tsparse[i:i + 8192]))
                       for i in range(0, tlabels.shape[0], 8192)]).double().numpy()
    y = tlabels.double().numpy()
    pc = np.clip(p, 1e-7, 1 - 1e-7)
    logloss = float(-(y * np.log(pc) + (1 - y) * np.log(1 - pc)).mean())
    ctr = y.mean()
    entropy = -(ctr * math.log(ctr) + (1 - ctr) * math.log(1 - ctr))
    return {"logloss": logloss, "ne": logloss / entropy, "auc": float(auc(p, y))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--table-size", type=int, default=100_000)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    dense, sparse, labels = load(args.train, args.table_size)
    test = load(args.test, args.table_size)
    model = DLRM(args.table_size, 16, [512, 256, 64], [512, 256])
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.BCEWithLogitsLoss()
    n = labels.shape[0]
    start = time.perf_counter()
    for i in range(0, n, args.batch_size):
        d, s, y = dense[i:i + args.batch_size], sparse[i:i + args.batch_size], labels[i:i + args.batch_size]
        opt.zero_grad()
        loss = loss_fn(model(d, s), y)
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    result = {"examples": int(n), "train_seconds": seconds, "examples_per_sec": n / seconds,
              "torch": torch.__version__}
    result.update(evaluate(model, test))
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
