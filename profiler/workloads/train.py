"""The reference workloads' models, synthetic batches and the training loop (PyTorch).

Models are built from stock modules (no subclasses), each paired with a batch maker and a forward function, so
one loop trains all four. The batch size defaults to $GPUADVISOR_BATCH_SIZE, which trials set for their command.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from profiler import report
from profiler.workloads import WORKLOADS

Batch = tuple[Any, Any]


@dataclass(frozen=True)
class Workload:
    """A model, a maker of synthetic (inputs, targets) batches and the forward pass producing logits."""

    model: Any
    make_batch: Callable[[int, Any], Batch]
    forward: Callable[[Any, Any], Any]


def _plain(model: Any, inputs: Any) -> Any:
    return model(inputs)


def cnn() -> Workload:
    """A small ResNet-like CNN on 64×64 RGB images, 100 classes (compute-bound convolutions)."""

    def block(c_in: int, c_out: int) -> Any:
        return nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )

    model = nn.Sequential(
        block(3, 32),
        block(32, 64),
        block(64, 128),
        block(128, 256),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(256, 100),
    )

    def make_batch(size: int, device: Any) -> Batch:
        return torch.randn(size, 3, 64, 64, device=device), torch.randint(0, 100, (size,), device=device)

    return Workload(model, make_batch, _plain)


def transformer() -> Workload:
    """A 4-layer Transformer encoder over 128-token sequences, sequence classification (attention, GEMMs)."""
    vocab, width, tokens = 8000, 256, 128
    embed = nn.Embedding(vocab, width)
    layer = nn.TransformerEncoderLayer(width, nhead=8, dim_feedforward=4 * width, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=4)
    head = nn.Linear(width, 10)
    model = nn.ModuleList([embed, encoder, head])

    def make_batch(size: int, device: Any) -> Batch:
        return torch.randint(0, vocab, (size, tokens), device=device), torch.randint(0, 10, (size,), device=device)

    def forward(m: Any, inputs: Any) -> Any:
        return m[2](m[1](m[0](inputs)).mean(dim=1))

    return Workload(model, make_batch, forward)


def lstm() -> Workload:
    """A 2-layer LSTM language-model step over 64-token sequences (sequential, latency-bound kernels)."""
    vocab, width, tokens = 10000, 512, 64
    model = nn.ModuleList(
        [nn.Embedding(vocab, width), nn.LSTM(width, width, num_layers=2, batch_first=True), nn.Linear(width, vocab)]
    )

    def make_batch(size: int, device: Any) -> Batch:
        return torch.randint(0, vocab, (size, tokens), device=device), torch.randint(0, vocab, (size,), device=device)

    def forward(m: Any, inputs: Any) -> Any:
        out, _ = m[1](m[0](inputs))
        return m[2](out[:, -1])

    return Workload(model, make_batch, forward)


def recommender() -> Workload:
    """A DLRM-like model: a large embedding bag over 32 sparse features, then an MLP (memory-bandwidth-bound)."""
    rows, width, features = 200_000, 64, 32
    model = nn.Sequential(
        nn.EmbeddingBag(rows, width, mode="sum"),
        nn.Linear(width, 256),
        nn.ReLU(),
        nn.Linear(256, 64),
        nn.ReLU(),
        nn.Linear(64, 2),
    )

    def make_batch(size: int, device: Any) -> Batch:
        return torch.randint(0, rows, (size, features), device=device), torch.randint(0, 2, (size,), device=device)

    return Workload(model, make_batch, _plain)


BUILDERS: dict[str, Callable[[], Workload]] = {
    "cnn": cnn,
    "transformer": transformer,
    "lstm": lstm,
    "recommender": recommender,
}


def train(name: str, *, steps: int, batch_size: int, device: str, out: Any = None) -> None:
    """Train `name` for `steps` steps on fresh synthetic batches, reporting progress after every step."""
    workload = BUILDERS[name]()
    target = torch.device(device)
    model = workload.model.to(target)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(1, steps + 1):
        inputs, targets = workload.make_batch(batch_size, target)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(workload.forward(model, inputs), targets)
        loss.backward()
        optimizer.step()
        if target.type == "cuda":
            torch.cuda.synchronize(target)  # the step is done when the GPU is, not when the launch returns
        report(step=step, samples=step * batch_size, out=out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m profiler.workloads", description=__doc__)
    parser.add_argument("workload", choices=WORKLOADS)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=int(os.environ.get("GPUADVISOR_BATCH_SIZE", "32")))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    if args.steps <= 0 or args.batch_size <= 0:
        parser.error("--steps and --batch-size must be positive")
    train(args.workload, steps=args.steps, batch_size=args.batch_size, device=args.device)
