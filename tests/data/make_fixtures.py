"""Rebuild the committed test fixtures in this folder (see README.md here).

    python tests/data/make_fixtures.py [--data ../shared/data]

Two kinds of file:
- cut from the public data sets, unmodified lines, only from sources whose licence allows it
  (STS-B `images` and `track5.en-en` pairs, CC BY-SA; WNUT-17, CC BY 4.0);
- written here from templates, in the formats of the research-use sets (SST-2,
  SemEval-2010 Task 8), so none of their text is copied.

The output is deterministic: running it twice gives the same bytes.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


# --- cut from CC BY / CC BY-SA data -----------------------------------------------------


def cut_stsb(data: Path) -> None:
    """Every 2nd `images` pair and every 3rd `track5.en-en` pair of STS-B dev, in file order."""
    lines = (data / "stsb" / "sts-dev.csv").read_text(encoding="utf-8").splitlines()
    seen = {"images": 0, "track5.en-en": 0}
    every = {"images": 2, "track5.en-en": 3}
    keep = []
    for line in lines:
        source = line.split("\t")[1]
        if source in seen:
            if seen[source] % every[source] == 0:
                keep.append(line)
            seen[source] += 1
    (HERE / "stsb-dev-sample.csv").write_text("\n".join(keep) + "\n", encoding="utf-8")


def cut_wnut(data: Path) -> None:
    """The first 100 sentences of WNUT-17 train and the first 40 of dev, lines unmodified.

    A sentence ends at a blank line (train writes it as a lone tab); the cut keeps it.
    """
    for name, out, count in (
        ("wnut17train.conll", "wnut17-train-sample.conll", 100),
        ("emerging.dev.conll", "wnut17-dev-sample.conll", 40),
    ):
        keep, done = [], 0
        for line in (data / "wnut17" / name).read_text(encoding="utf-8").splitlines():
            keep.append(line)
            if not line.strip() and keep[:-1] and keep[-2].strip():
                done += 1
                if done == count:
                    break
        (HERE / out).write_text("\n".join(keep) + "\n", encoding="utf-8")


# --- written here ------------------------------------------------------------------------

SUBJECTS = ["the film", "this movie", "the script", "the acting", "the story", "the ending",
            "the direction", "the cast", "the soundtrack", "the dialogue", "the plot",
            "the lead performance"]  # fmt: skip
GOOD = ["wonderful", "moving", "funny", "clever", "beautiful", "gripping", "charming", "smart",
        "delightful", "touching", "brilliant", "warm", "fresh", "thoughtful"]  # fmt: skip
BAD = ["dull", "tedious", "clumsy", "boring", "shallow", "messy", "lifeless", "predictable",
       "awkward", "tiresome", "forgettable", "flat", "stale", "pointless"]  # fmt: skip
SENTIMENT_TEMPLATES = [
    "{s} is {a} .",
    "{s} feels {a} from start to finish .",
    "i found {s} {a} and {b} .",
    "by the end , {s} is simply {a} .",
    "{s} -- {a} , {b} and never less than that .",
    "what a {a} surprise : {s} stays with you .",
    "even at its best , {s} is {a} rather than {b} .",
]


def sentiment(rng: random.Random, n: int) -> list[str]:
    """`LABEL sentence` lines (SST-2 format: tokenised, lower case), labels alternating."""
    lines = []
    for i in range(n):
        label = i % 2
        words = GOOD if label else BAD
        a, b = rng.sample(words, 2)
        template = rng.choice(SENTIMENT_TEMPLATES)
        if "a {a} surprise" in template and not label:
            template = "what a {a} letdown : {s} drags on ."
        lines.append(f"{label} " + template.format(s=rng.choice(SUBJECTS), a=a, b=b))
    return lines


# fmt: off
RELATIONS = {
    "Component-Whole(e1,e2)": (
        [("wheel", "bicycle"), ("keyboard", "laptop"), ("engine", "car"), ("handle", "door"),
         ("leaf", "tree"), ("screen", "phone"), ("roof", "house"), ("page", "book"),
         ("string", "guitar"), ("lens", "camera"), ("wing", "plane"), ("blade", "fan")],
        ["The <e1>{x}</e1> of the <e2>{y}</e2> was broken.",
         "A new <e1>{x}</e1> was fitted to the old <e2>{y}</e2>.",
         "She replaced the <e1>{x}</e1> on her <e2>{y}</e2> last week."],
    ),
    "Cause-Effect(e1,e2)": (
        [("storm", "flood"), ("fire", "panic"), ("virus", "fever"), ("earthquake", "collapse"),
         ("spark", "explosion"), ("drought", "famine"), ("smoke", "cough"),
         ("accident", "delay"), ("heat", "fatigue"), ("noise", "headache")],
        ["The <e1>{x}</e1> caused a <e2>{y}</e2> in the town.",
         "A sudden <e1>{x}</e1> led to the <e2>{y}</e2> that followed.",
         "Doctors said the <e2>{y}</e2> was triggered by the <e1>{x}</e1>."],
    ),
    "Entity-Origin(e1,e2)": (
        [("wine", "vineyard"), ("milk", "farm"), ("oil", "well"), ("honey", "hive"),
         ("letter", "embassy"), ("water", "spring"), ("silk", "worm"), ("coal", "mine"),
         ("steam", "kettle"), ("pearl", "oyster")],
        ["The <e1>{x}</e1> came from a small <e2>{y}</e2>.",
         "This <e1>{x}</e1> was taken from the <e2>{y}</e2> at dawn.",
         "Most of the <e1>{x}</e1> originates in the <e2>{y}</e2> up the road."],
    ),
    "Content-Container(e1,e2)": (
        [("coins", "jar"), ("letters", "box"), ("tea", "tin"), ("water", "bottle"),
         ("books", "crate"), ("clothes", "suitcase"), ("flour", "sack"), ("keys", "drawer"),
         ("photos", "envelope"), ("tools", "bag")],
        ["The <e1>{x}</e1> were kept in a <e2>{y}</e2>.",
         "He found the <e1>{x}</e1> inside an old <e2>{y}</e2>.",
         "A <e2>{y}</e2> full of <e1>{x}</e1> stood by the door."],
    ),
    "Other": (
        [("teacher", "river"), ("song", "window"), ("lamp", "election"), ("dog", "theory"),
         ("garden", "meeting"), ("clock", "novel"), ("bridge", "recipe"), ("cloud", "ticket"),
         ("chair", "festival"), ("map", "soup")],
        ["The <e1>{x}</e1> was mentioned next to the <e2>{y}</e2>.",
         "Nobody linked the <e1>{x}</e1> with the <e2>{y}</e2> at first.",
         "After the <e1>{x}</e1>, we talked about the <e2>{y}</e2>."],
    ),
}
# fmt: on


def relations(rng: random.Random, n: int, first_id: int) -> list[str]:
    """SemEval-2010 Task 8 blocks: id<TAB>"marked sentence", label, comment, blank line."""
    labels = sorted(RELATIONS)
    lines = []
    for i in range(n):
        label = labels[i % len(labels)]
        pairs, templates = RELATIONS[label]
        x, y = rng.choice(pairs)
        sentence = rng.choice(templates).format(x=x, y=y)
        lines += [f'{first_id + i}\t"{sentence}"', label, "Comment:", ""]
    return lines


def write_lines(name: str, lines: list[str]) -> None:
    (HERE / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=HERE.parents[2] / "shared" / "data")
    args = parser.parse_args()
    if args.data.is_dir():
        cut_stsb(args.data)
        cut_wnut(args.data)
    else:
        print(f"{args.data} not found: only the written fixtures are rebuilt")
    rng = random.Random(0)
    write_lines("sentiment.txt", sentiment(rng, 120))
    write_lines("relations-train.txt", relations(rng, 125, 1))
    write_lines("relations-dev.txt", relations(rng, 50, 1001))


if __name__ == "__main__":
    main()
