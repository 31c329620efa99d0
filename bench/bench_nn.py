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
shows the median and the spread (min-max) over rounds. poolkit is timed three times: with
its default data checks (on the device, no host wait), with ``check="full"`` (flags read
back once per forward pass, exact errors) and with ``check=False`` (none); the ratio and
the target use the default (CPU: 1.2x for the poolers, 1.5x for spans; CUDA: 1.3x). On
CUDA the default modules run under ``torch.cuda.set_sync_debug_mode("error")``, so a
forward or backward pass that waited for the host would stop the benchmark. Runs
unattended on CPU or CUDA (``--device auto``: CUDA when torch sees one); needs no network
and no data files.

    python bench/bench_nn.py [--device auto|cpu|cuda --batch 32 --length 128 --hidden 768
                              --spans 16 --max-width 10 --rounds 15 --repeat 3 --plot PNG]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

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


@contextlib.contextmanager
def no_sync(device: torch.device, strict: bool) -> Iterator[None]:
    """On CUDA with ``strict``: any synchronising operation inside raises."""
    if not (strict and device.type == "cuda"):
        yield
        return
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)


def fwd_bwd(
    fn: Callable[[], torch.Tensor], hidden: torch.Tensor, device: torch.device, strict: bool
) -> Callable[[], None]:
    def run() -> None:
        hidden.grad = None
        with no_sync(device, strict):
            fn().sum().backward()

    return run


def check(
    name: str,
    ours: Callable[[], torch.Tensor],
    plain: Callable[[], torch.Tensor],
    hidden: torch.Tensor,
    device: torch.device,
    strict: bool,
) -> None:
    """Outputs and input gradients must agree before anything is timed."""
    results = []
    for fn, no_wait in ((ours, strict), (plain, False)):
        hidden.grad = None
        with no_sync(device, no_wait):
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--spans", type=int, default=16, help="spans per row")
    parser.add_argument("--max-width", type=int, default=10, help="widest span (tokens)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=3, help="calls per timed round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", metavar="PNG", help="also draw the table's times to PNG")
    return parser


def run(args: argparse.Namespace) -> bool:
    """Check, time and print the table for ``args`` (``build_parser``'s); True when every
    case meets its target on this device."""
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
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

    def modules(check_data: bool | str) -> tuple[Pooler, Pooler, SpanExtractor]:
        torch.manual_seed(args.seed)
        ext = SpanExtractor(hid, "endpoints,attention", width_embedding_dim=20, check=check_data)
        return Pooler("mean", check=check_data), Pooler("max", check=check_data), ext.to(device)

    modes: tuple[bool | str, ...] = (True, "full", False)  # default, exact, none
    mean, maxp, ext = zip(*(modules(mode) for mode in modes), strict=True)
    assert ext[0].scorer is not None and ext[0].width_embedding is not None
    for other in ext[1:]:
        other.load_state_dict(ext[0].state_dict())
    plain_ext = PlainSpanExtractor(ext[0].scorer, ext[0].width_embedding)

    # (label, poolkit in each mode of ``modes``, plain, target ratio on CPU / on CUDA)
    cases = [
        (
            "Pooler mean",
            [lambda m=m: m(hidden, mask) for m in mean],
            lambda: plain_mean(hidden, mask),
            (1.2, 1.3),
        ),
        (
            "Pooler max",
            [lambda m=m: m(hidden, mask) for m in maxp],
            lambda: plain_max(hidden, mask),
            (1.2, 1.3),
        ),
        (
            f"SpanExtractor x,y,attn+width {args.spans} spans/row",
            [lambda m=m: m(hidden, spans, mask) for m in ext],
            lambda: plain_ext(hidden, spans),
            (1.5, 1.3),
        ),
    ]
    for name, ours, plain, _ in cases:
        for mode, fn in zip(modes, ours, strict=True):
            check(f"{name} (check={mode!r})", fn, plain, hidden, device, strict=mode is True)

    # the default mode (slot 0) must not wait for the host: strict on CUDA
    runs = [
        [fwd_bwd(fn, hidden, device, strict=k == 0) for k, fn in enumerate([*ours, plain])]
        for _, ours, plain, _ in cases
    ]
    slots = len(runs[0])
    for contenders in runs:  # warm-up
        for run in contenders:
            run()
            run()
    times: list[list[list[float]]] = [[[] for _ in range(slots)] for _ in cases]
    for r in range(args.rounds):
        for i, contenders in enumerate(runs):
            for k in range(slots):  # rotate the order every round
                slot = (k + r) % slots
                times[i][slot].append(timed(contenders[slot], args.repeat, device))

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"fwd+bwd, ({b}, {length}, {hid}) float32, lengths {int(lengths.min())}-"
        f"{int(lengths.max())}, {args.device} ({name}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; median [min-max] ms over {args.rounds} "
        f"interleaved rounds of {args.repeat} calls"
    )
    print(
        f"{'case':<40} {'poolkit':>21} {'check=full':>21} {'check=False':>21} "
        f"{'plain torch':>21} {'ratio':>6} {'(full)':>6} {'(c=F)':>6} {'target':>6}"
    )
    met = True
    for (label, *_, targets), per_slot in zip(cases, times, strict=True):
        cells = [f"{statistics.median(t):6.2f} [{min(t):.2f}-{max(t):.2f}]" for t in per_slot]
        plain_ms = statistics.median(per_slot[-1])
        ratios = [statistics.median(t) / plain_ms for t in per_slot[:-1]]
        target = targets[0] if device.type == "cpu" else targets[1]
        verdict = "ok" if ratios[0] <= target else "MISS"
        met = met and ratios[0] <= target
        print(
            f"{label:<40} {' '.join(f'{c:>21}' for c in cells)} "
            f"{' '.join(f'{r:5.2f}x' for r in ratios)} {target:>5}x {verdict}"
        )
    if args.plot:
        from _plot import interval_bars

        contenders = ("poolkit (default)", "check='full'", "check=False", "plain torch")
        interval_bars(
            args.plot,
            f"poolkit.nn forward + backward, ({b}, {length}, {hid}) float32, {args.device} "
            f"({name}), torch {torch.__version__}, {torch.get_num_threads()} threads",
            [(label, list(zip(contenders, per_slot, strict=True)))
             for (label, *_), per_slot in zip(cases, times, strict=True)],
            "ms",
        )  # fmt: skip
    return met


def main() -> None:
    run(build_parser().parse_args())


if __name__ == "__main__":
    main()
