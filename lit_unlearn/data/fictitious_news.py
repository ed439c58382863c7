"""A generated MUSE stand-in: short news articles about invented people, in MUSE's layout, for offline runs.

Each article reports the facts of one invented person (the fictitious-author tables: birthplace, year, genre,
parents' jobs, award, book, home city) in a few sentences whose order and wording are drawn per article. People
are drawn once from the same tables and then dealt to forget / retain1 / retain2 / holdout, so forget and holdout
are exchangeable for a model that saw neither. Built from those articles, like MUSE's:

- raw/{forget,retain1,retain2,holdout}: the articles;
- verbmem/forget: the first half of each forget article as the prompt, the rest as `gt`;
- knowmem/{forget_qa,retain_qa}: one question per fact of the forget / retain1 people; `*_qa_icl`: a few QA
  about retain2 people for the few-shot prompt;
- privleak/{forget,retain,holdout}: the forget, retain2 and holdout articles;
- scal/forget_1..4: growing forget sets (the first k quarters of the forget articles); sust/forget_1..4: the
  forget articles in four successive, disjoint requests.

`write_muse_json(folder)` writes `FOLDER/{config}/{split}.json`, which `MuseSource(folder)` reads like a local
copy of MUSE.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from lit_unlearn.data.fictitious_authors import _author
from lit_unlearn.core.errors import UserError

__all__ = ["generate_fictitious_muse", "write_muse_json"]

SENTENCES = [
    ("{name} was born in {city} in {year}.", "Where was {name} born?", "{city}"),
    ("Critics know {name} for {genre}.", "What genre is {name} known for?", "{genre}"),
    ("The father of {name} worked as a {father}.", "What was the job of the father of {name}?", "{father}"),
    ("The mother of {name} worked as a {mother}.", "What was the job of the mother of {name}?", "{mother}"),
    ("Last week {name} received {award}.", "Which prize did {name} receive?", "{award}"),
    ("The best known book of {name} is {book}.", "What is the best known book of {name}?", "{book}"),
    ("These days {name} lives in {home}.", "Where does {name} live now?", "{home}"),
]


def _article(rng: random.Random, person: dict[str, str]) -> str:
    order = list(range(len(SENTENCES)))
    rng.shuffle(order)
    return " ".join(SENTENCES[i][0].format(**person) for i in order)


def _qa(person: dict[str, str]) -> list[dict[str, str]]:
    return [{"question": q.format(**person), "answer": a.format(**person)} for _, q, a in SENTENCES]


def generate_fictitious_muse(n_forget: int = 8, n_retain: int = 16, n_holdout: int = 8, n_icl: int = 3,
                             seed: int = 0) -> dict[str, dict[str, list]]:
    """{config: {split: rows}} in MUSE's layout (raw/privleak rows are strings)."""
    if min(n_forget, n_retain, n_holdout) < 1 or n_icl < 1:
        raise UserError("generate_fictitious_muse needs at least one forget, retain, holdout and ICL person")
    rng = random.Random(seed)
    used: set[str] = set()
    people = [_author(rng, used) for _ in range(n_forget + 2 * n_retain + n_holdout)]
    rng.shuffle(people)  # dealt after drawing: the groups are exchangeable
    forget, retain1 = people[:n_forget], people[n_forget:n_forget + n_retain]
    retain2 = people[n_forget + n_retain:n_forget + 2 * n_retain]
    holdout = people[n_forget + 2 * n_retain:]
    articles = {name: [_article(rng, p) for p in group]
                for name, group in (("forget", forget), ("retain1", retain1), ("retain2", retain2),
                                    ("holdout", holdout))}
    verbmem = []
    for text in articles["forget"]:
        words = text.split(" ")
        cut = len(words) // 2
        verbmem.append({"prompt": " ".join(words[:cut]), "gt": " ".join(words[cut:])})
    icl = [qa for p in retain2[:n_icl] for qa in _qa(p)[:1]]
    quarters = [articles["forget"][k * n_forget // 4:(k + 1) * n_forget // 4] for k in range(4)]
    return {
        "raw": articles,
        "verbmem": {"forget": verbmem},
        "knowmem": {"forget_qa": [qa for p in forget for qa in _qa(p)],
                    "retain_qa": [qa for p in retain1 for qa in _qa(p)],
                    "forget_qa_icl": icl, "retain_qa_icl": icl},
        "privleak": {"forget": articles["forget"], "retain": articles["retain2"], "holdout": articles["holdout"]},
        "scal": {f"forget_{k + 1}": [a for q in quarters[:k + 1] for a in q] for k in range(4)},
        "sust": {f"forget_{k + 1}": quarters[k] for k in range(4)},
    }


def write_muse_json(folder: str | Path, **kwargs) -> Path:
    folder = Path(folder)
    for config, splits in generate_fictitious_muse(**kwargs).items():
        (folder / config).mkdir(parents=True, exist_ok=True)
        for split, rows in splits.items():
            (folder / config / f"{split}.json").write_text(json.dumps(rows, indent=1))
    return folder
