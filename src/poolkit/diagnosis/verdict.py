"""The verdict of a diagnosis: the candidate that made the vectors against the model's intent.

Pure functions over :class:`~poolkit.diagnosis.space.Candidate` values: :func:`deviations`
lists what the found candidate does differently from the intended one (pooling, modules after
pooling, normalisation, dimensions, truncation, prompt), :func:`verdict` says it in one line
and :func:`fix` gives the ``poolkit embed`` flags that make the intended vectors.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from poolkit.diagnosis.space import Candidate

__all__ = ["Deviation", "deviations", "fix", "verdict"]

_WORDS = {"cls": "CLS", "last": "last-token", "weighted_mean": "weighted-mean",
          "mean_sqrt_len": "mean-sqrt-len"}  # fmt: skip


@dataclass(frozen=True)
class Deviation:
    """One way the found vectors differ from the intended ones: ``aspect`` (``pooling``,
    ``head``, ``normalize``, ``dims``, ``max_length``, ``prompt``) and ``text``, in words."""

    aspect: str
    text: str


def describe_pooling(c: Candidate) -> str:
    """``"CLS"``, ``"mean over layers last4"``, ``"cls+mean"``: a candidate's pooling in words."""
    r = c.recipe
    parts = [
        _WORDS.get(name, name) + (" without special tokens" if drop else "")
        for name, drop in r.parts
    ]
    text = " + ".join(parts)
    if r.layers is not None:
        text += f" over layers {str(r.pooling.replace(normalize=None)).split('@', 1)[1]}"
    return text


def _prompt(p: str | None) -> str:
    return "no prompt" if p is None else f"the prompt {p!r}"


def deviations(found: Candidate, intended: Candidate, width: int) -> list[Deviation]:
    """What ``found`` does unlike ``intended``; ``width``: the vectors' width (for ``dims``)."""
    out: list[Deviation] = []
    a, b = found.recipe, intended.recipe
    if (a.strategy, a.layers, a.layer_how) != (b.strategy, b.layers, b.layer_how):
        out.append(Deviation("pooling", f"these are {describe_pooling(found)} vectors; the "
                             f"model was trained with {describe_pooling(intended)}"))  # fmt: skip
    if found.head is False and intended.head:
        out.append(Deviation("head", "the model's modules after pooling (Dense/LayerNorm) "
                             "were not applied"))  # fmt: skip
    if bool(a.normalize) != bool(b.normalize):
        out.append(Deviation("normalize", "not normalised; the model normalises" if b.normalize
                             else "normalised; the model does not normalise"))  # fmt: skip
    if a.dims is not None:
        again = "" if not a.normalize or found.renormalized else ", not normalised again"
        out.append(Deviation("dims", f"cut to their first {width} dimensions{again}"))
    if found.max_length != intended.max_length:
        out.append(Deviation("max_length", f"truncated at {found.max_length} tokens; the "
                             f"model takes {intended.max_length}"))  # fmt: skip
    if found.prompt != intended.prompt:
        out.append(Deviation("prompt", f"made with {_prompt(found.prompt)}; the model uses "
                             f"{_prompt(intended.prompt)} by default"))  # fmt: skip
    return out


def fix(
    found: Candidate, intended: Candidate, devs: list[Deviation], prompts: dict[str, str]
) -> str:
    """The ``poolkit embed`` flags that give the intended vectors (keeping a deliberate
    Matryoshka cut), or ``""`` when nothing but the cut differs. ``prompts``: the model's
    named prompts (a prompt of the user's own is given with ``--prompt``)."""
    aspects = {d.aspect for d in devs}
    flags = []
    if aspects & {"pooling", "head", "normalize"}:
        recipe = intended.recipe.replace(dims=found.recipe.dims, normalize=None)
        flags.append(f"--recipe {recipe}")
    if "max_length" in aspects:
        flags.append(f"--max-length {intended.max_length}")
    if "prompt" in aspects:
        p = intended.prompt
        flags.append("--prompt ''" if p is None else
                     f"--prompt-name {p}" if p in prompts else f"--prompt {shlex.quote(p)}")  # fmt: skip
    return " ".join(flags)


def verdict(found: Candidate | None, intended: Candidate, devs: list[Deviation], fix_flags: str,
            nearest: str, cos_median: float, why: list[str]) -> str:  # fmt: skip
    """The diagnosis in one line: OK, MISMATCH (what differs and the fix) or NO MATCH."""
    if found is None:
        reason = f": {why[0]}" if why else ""
        return (f"NO MATCH: no candidate reproduces these vectors (nearest: {nearest}, median "
                f"cosine {cos_median:.4f}){reason}")  # fmt: skip
    want = describe_pooling(intended) + (", normalised" if intended.recipe.normalize else "")
    if not devs:
        return f"OK: these are the model's intended vectors ({want}, {intended.max_length} tokens)"
    if {d.aspect for d in devs} == {"dims"}:
        return f"OK: the model's intended vectors ({want}), {devs[0].text} (Matryoshka)"
    what = "; ".join(d.text for d in devs)
    return f"MISMATCH: {what}: use `{fix_flags}`" if fix_flags else f"MISMATCH: {what}"
