"""Time poolkit.nn forward + backward against plain masked torch implementations.

Training-path benchmark: hidden states that require grad, ``(32, 128, 768)`` float32 with
random lengths (right padding). Contenders, each checked to agree with poolkit (outputs
and gradients) before any time is printed:

* ``Pooler("mean")`` / ``Pooler("max")`` vs the founding document's masked torch code
  (multiply by the expanded mask, sum, divide by the clamped count; ``masked_fill`` with
  -1e9, then ``max``);
* ``SpanExtractor("endpoints,attention", width_embedding_dim=20)`` vs an AllenNLP-style
  extractor written here: endpoint gather, a ``(B, S, W, H)`` gather of each span's
  tokens up to the widest span ``W``, masked softmax of a learned score, and a width
  embedding (same weights for both).

Rounds are interleaved (every contender once per round, order rotating) and the table
shows the median and the spread (min-max) over rounds. poolkit is timed twice: with its
default data checks (one host sync per forward pass) and with ``check=False`` (none); the
ratio and the CPU target (1.2x for the poolers, 1.5x for spans) use the default. Runs
unattended on CPU or CUDA; needs no network and no data files.

    python bench/bench_nn.py [--device cpu|cuda --batch 32 --length 128 --hidden 768
                              --spans 16 --max-width 10 --rounds 15 --repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from poolkit.nn import Pooler, SpanExtractor

LOG_BOUNDS = (1, 2, 3, 4, 5, 6, 9, 17, 33, 65)  # width bucket lower bounds (Lee et al. 2017)


def plain_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The founding document's masked mean."""
    mask_expanded = mask.unsqueeze(-1).expand(hidden.size()).float()
    sum_embeddings = torch.sum(hidden * mask_expanded, 1)
    sum_mask = torch.clamp(mask_expanded.sum(1), min=1e-9)
    return sum_embeddings / sum_mask


def plain_max(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The founding document's masked max."""
    mask_expanded = mask.unsqueeze(-1).expand(hidden.size())
    return torch.max(hidden.masked_fill(~mask_expanded.bool(), -1e9), dim=1).values


class PlainSpanExtractor(nn.Module):
    """AllenNLP-style endpoint + self-attentive + width-embedding span extractor."""

    def __init__(self, scorer: nn.Linear, width_embedding: nn.Embedding):
        super().__init__()
        self.scorer, self.width_embedding = scorer, width_embedding

    def forward(self, hidden: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        b, length, _ = hidden.shape
        start, end = spans[..., 0], spans[..., 1]
        rows = torch.arange(b, device=hidden.device)[:, None]
        x, y = hidden[rows, start], hidden[rows, end]
        widths = end - start + 1
        max_width = int(widths.max())  # AllenNLP's batched_span_select syncs here too
        offsets = torch.arange(max_width, device=hidden.device)
        inside = offsets <= (widths - 1)[..., None]  # (B, S, W)
        index = (start[..., None] + offsets).clamp(max=length - 1)
        tokens = hidden[rows[..., None], index]  # (B, S, W, H)
        logits = self.scorer(hidden).squeeze(-1)[rows[..., None], index]
        weights = torch.softmax(logits.masked_fill(~inside, float("-inf")), dim=-1)
        attended = (weights[..., None] * tokens).sum(dim=-2)
        buckets = torch.bucketize(
            widths, torch.tensor(LOG_BOUNDS, device=hidden.device), right=True
        )
        width = self.width_embedding(buckets - 1)
        return torch.cat([x, y, attended, width], dim=-1)


def fwd_bwd(fn: Callable[[], torch.Tensor], hidden: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        hidden.grad = None
        fn().sum().backward()

    return run


def check(name: str, ours: Callable[[], torch.Tensor], plain: Callable[[], torch.Tensor], hidden):
    """Outputs and input gradients must agree before anything is timed."""
    results = []
    for fn in (ours, plain):
        hidden.grad = None
        out = fn()
        out.sum().backward()
        results.append((out.detach(), hidden.grad.clone()))
    for what, a, b in (
        ("output", results[0][0], results[1][0]),
        ("grad", *(r[1] for r in results)),
    ):
        diff = float((a - b).abs().max())
        if not diff <= 1e-4:
            raise SystemExit(
                f"{name}: {what} disagrees with the plain version (max abs {diff:.2e})"
            )


def timed(run: Callable[[], None], repeat: int, device: torch.device) -> float:
    """Milliseconds per call over ``repeat`` calls."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(repeat):
        run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / repeat * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--spans", type=int, default=16, help="spans per row")
    parser.add_argument("--max-width", type=int, default=10, help="widest span (tokens)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=3, help="calls per timed round")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device here")
    device = torch.device(args.device)

    gen = torch.Generator().manual_seed(args.seed)
    b, length, hid = args.batch, args.length, args.hidden
    lengths = torch.randint(args.max_width, length + 1, (b,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long().to(device)
    hidden = torch.randn(b, length, hid, generator=gen).to(device).requires_grad_(True)
    widths = torch.randint(1, args.max_width + 1, (b, args.spans), generator=gen)
    starts = (torch.rand(b, args.spans, generator=gen) * (lengths[:, None] - widths + 1)).long()
    spans = torch.stack([starts, starts + widths - 1], dim=-1).to(device)

    def modules(check_data: bool) -> tuple[Pooler, Pooler, SpanExtractor]:
        torch.manual_seed(args.seed)
        ext = SpanExtractor(hid, "endpoints,attention", width_embedding_dim=20, check=check_data)
        return Pooler("mean", check=check_data), Pooler("max", check=check_data), ext.to(device)

    (mean, maxp, ext), (mean_nc, maxp_nc, ext_nc) = modules(True), modules(False)
    assert ext.scorer is not None and ext.width_embedding is not None
    ext_nc.load_state_dict(ext.state_dict())
    plain_ext = PlainSpanExtractor(ext.scorer, ext.width_embedding)

    # (label, poolkit with checks, poolkit with check=False, plain, target ratio)
    cases = [
        (
            "Pooler mean",
            lambda: mean(hidden, mask),
            lambda: mean_nc(hidden, mask),
            lambda: plain_mean(hidden, mask),
            1.2,
        ),
        (
            "Pooler max",
            lambda: maxp(hidden, mask),
            lambda: maxp_nc(hidden, mask),
            lambda: plain_max(hidden, mask),
            1.2,
        ),
        (
            f"SpanExtractor x,y,attn+width {args.spans} spans/row",
            lambda: ext(hidden, spans, mask),
            lambda: ext_nc(hidden, spans, mask),
            lambda: plain_ext(hidden, spans),
            1.5,
        ),
    ]
    for name, ours, unchecked, plain, _ in cases:
        check(name, ours, plain, hidden)
        check(name + " (check=False)", unchecked, plain, hidden)

    runs = [[fwd_bwd(fn, hidden) for fn in case[1:4]] for case in cases]
    for contenders in runs:  # warm-up
        for run in contenders:
            run()
            run()
    times: list[list[list[float]]] = [[[], [], []] for _ in cases]
    for r in range(args.rounds):
        for i, contenders in enumerate(runs):
            for k in range(3):  # rotate the order every round
                slot = (k + r) % 3
                times[i][slot].append(timed(contenders[slot], args.repeat, device))

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"fwd+bwd, ({b}, {length}, {hid}) float32, lengths {int(lengths.min())}-"
        f"{int(lengths.max())}, {args.device} ({name}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; median [min-max] ms over {args.rounds} "
        f"interleaved rounds of {args.repeat} calls"
    )
    print(
        f"{'case':<40} {'poolkit':>21} {'check=False':>21} {'plain torch':>21} "
        f"{'ratio':>6} {'(c=F)':>6} {'target':>6}"
    )
    for (label, *_, target), slots in zip(cases, times, strict=True):
        cells = [f"{statistics.median(t):6.2f} [{min(t):.2f}-{max(t):.2f}]" for t in slots]
        ratios = [statistics.median(t) / statistics.median(slots[2]) for t in slots[:2]]
        # the targets are set for the CPU; on an accelerator the table only reports
        verdict = ("ok" if ratios[0] <= target else "MISS") if device.type == "cpu" else "-"
        print(
            f"{label:<40} {cells[0]:>21} {cells[1]:>21} {cells[2]:>21} "
            f"{ratios[0]:5.2f}x {ratios[1]:5.2f}x {target:>5}x {verdict}"
        )


if __name__ == "__main__":
    main()
