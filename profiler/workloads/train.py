"""The reference workloads' models, synthetic batches and the training loop (PyTorch).

Models are built from stock modules (no subclasses), each paired with a batch maker and a forward function, so
one loop trains all four. The batch size defaults to $GPUADVISOR_BATCH_SIZE, which trials set for their command.

`--scale K` multiplies every model's widths by K (a modern GPU needs more work per step than the scale-1 models give:
on an H100 they reached 0.12-0.53 SM utilisation, docs/gpu-validation.md); `--seconds S` trains for S seconds of
wall time instead of a step count, so a trial's length no longer depends on how fast the GPU is.
"""

from __future__ import annotations

import argparse
import os
import time
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


def cnn(scale: int = 1) -> Workload:
    """A small ResNet-like CNN on 64×64 RGB images, 100 classes (compute-bound convolutions)."""
    c1, c2, c3, c4 = (32 * scale, 64 * scale, 128 * scale, 256 * scale)

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
        block(3, c1),
        block(c1, c2),
        block(c2, c3),
        block(c3, c4),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(c4, 100),
    )

    def make_batch(size: int, device: Any) -> Batch:
        return torch.randn(size, 3, 64, 64, device=device), torch.randint(0, 100, (size,), device=device)

    return Workload(model, make_batch, _plain)


def transformer(scale: int = 1) -> Workload:
    """A 4-layer Transformer encoder over 128-token sequences, sequence classification (attention, GEMMs)."""
    vocab, width, tokens = 8000, 256 * scale, 128
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


def lstm(scale: int = 1) -> Workload:
    """A 2-layer LSTM language-model step over 64-token sequences (sequential, latency-bound kernels)."""
    vocab, width, tokens = 10000, 512 * scale, 64
    model = nn.ModuleList(
        [nn.Embedding(vocab, width), nn.LSTM(width, width, num_layers=2, batch_first=True), nn.Linear(width, vocab)]
    )

    def make_batch(size: int, device: Any) -> Batch:
        return torch.randint(0, vocab, (size, tokens), device=device), torch.randint(0, vocab, (size,), device=device)

    def forward(m: Any, inputs: Any) -> Any:
        out, _ = m[1](m[0](inputs))
        return m[2](out[:, -1])

    return Workload(model, make_batch, forward)


def recommender(scale: int = 1) -> Workload:
    """A DLRM-like model: a large embedding bag over 32 sparse features, then an MLP (memory-bandwidth-bound)."""
    rows, width, features = 200_000 * scale, 64 * scale, 32
    model = nn.Sequential(
        nn.EmbeddingBag(rows, width, mode="sum"),
        nn.Linear(width, 256 * scale),
        nn.ReLU(),
        nn.Linear(256 * scale, 64 * scale),
        nn.ReLU(),
        nn.Linear(64 * scale, 2),
    )

    def make_batch(size: int, device: Any) -> Batch:
        return torch.randint(0, rows, (size, features), device=device), torch.randint(0, 2, (size,), device=device)

    return Workload(model, make_batch, _plain)


BUILDERS: dict[str, Callable[[int], Workload]] = {
    "cnn": cnn,
    "transformer": transformer,
    "lstm": lstm,
    "recommender": recommender,
}


def train(
    name: str,
    *,
    steps: int | None,
    batch_size: int,
    device: str,
    scale: int = 1,
    seconds: float | None = None,
    out: Any = None,
) -> None:
    """Train `name` on fresh synthetic batches for `steps` steps or `seconds` of training, whichever ends first
    (at least one of them given), reporting progress after every step."""
    if steps is None and seconds is None:
        raise ValueError("give steps, seconds or both")
    workload = BUILDERS[name](scale)
    target = torch.device(device)
    model = workload.model.to(target)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    deadline = None if seconds is None else time.monotonic() + seconds
    step = 0
    while (steps is None or step < steps) and (deadline is None or time.monotonic() < deadline):
        step += 1
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
    parser.add_argument("--steps", type=int, default=None, help="steps to train (default 200 without --seconds)")
    parser.add_argument("--seconds", type=float, default=None, help="train this long instead (with --steps: or)")
    parser.add_argument("--scale", type=int, default=1, help="multiply the model's widths (a bigger GPU: 2, 4, ...)")
    parser.add_argument("--batch-size", type=int, default=int(os.environ.get("GPUADVISOR_BATCH_SIZE", "32")))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    steps = 200 if args.steps is None and args.seconds is None else args.steps
    if (steps is not None and steps <= 0) or args.batch_size <= 0 or args.scale <= 0:
        parser.error("--steps, --batch-size and --scale must be positive")
    if args.seconds is not None and args.seconds <= 0:
        parser.error("--seconds must be positive")
    train(
        args.workload,
        steps=steps,
        batch_size=args.batch_size,
        device=args.device,
        scale=args.scale,
        seconds=args.seconds,
    )
