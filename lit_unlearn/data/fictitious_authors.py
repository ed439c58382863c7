"""A generated fictitious-author QA set in TOFU's format, for offline runs and tests.

TOFU (Maini et al. 2024) asks questions about 200 invented authors. This module invents authors the same
way, from seeded attribute tables, and writes every split TOFU has, with its columns:

- full, forget01/05/10 (the *last* 1/5/10 % of authors, like TOFU) and retain99/95/90 (the complement):
  question, answer;
- forget01/05/10_perturbed, retain_perturbed (a subset of the retain authors): plus paraphrased_question,
  paraphrased_answer and perturbed_answer (5 wrong answers of the same shape);
- holdout01/05/10: authors never in `full` (for membership inference), as many as in forget01/05/10 and drawn
  from the same tables, so forget and holdout authors are exchangeable for a model that saw neither;
- holdout_perturbed (an extra split, not in TOFU): the holdout items with paraphrases and perturbed answers, so
  a tokenizer trained on the distinct texts sees holdout authors exactly as often as forget authors (when it saw
  forget names in 7 phrasings and holdout names in one, the retain-only model's MIA AUC between the two was
  0.88-0.90 instead of about 0.5);
- full_perturbed (an extra split, not in TOFU): every item with its paraphrase and perturbed answers, so an
  offline model without pretraining can be taught the paraphrased phrasing as "language knowledge";
- real_authors(_perturbed), world_facts(_perturbed): a fixed "general knowledge" set (3 perturbed answers),
  which the demo teaches both the target and the retain-only model, standing in for pretraining.

Everything is a pure function of the seed. `write_tofu_json(folder)` writes `{split}.json` files that
`TofuSource` reads exactly like a local copy of the real dataset.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from lit_unlearn.core.errors import UserError

__all__ = ["generate_fictitious_tofu", "write_tofu_json", "FORGET_LEVELS"]

FORGET_LEVELS = {"01": 0.01, "05": 0.05, "10": 0.10}

FIRST = ["Amara", "Basil", "Celine", "Dorian", "Elif", "Farid", "Greta", "Hamid", "Ines", "Jonas", "Kiran", "Lena",
         "Milo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Soren", "Talia", "Umar", "Vera", "Wendell", "Xiomara",
         "Yusuf", "Zelda", "Anouk", "Bruno", "Chiara", "Dmitri"]
LAST = ["Okafor", "Lindqvist", "Moreau", "Haddad", "Tanaka", "Novak", "Castillo", "Brennan", "Adeyemi", "Kowalski",
        "Sato", "Varga", "Oduya", "Petrov", "Almeida", "Rahimi", "Larsen", "Ferreira", "Mbeki", "Quist"]
CITIES = ["Lisbon", "Accra", "Osaka", "Tbilisi", "Quito", "Tallinn", "Nairobi", "Lyon", "Busan", "Porto", "Dakar",
          "Bergen", "Cusco", "Hanoi", "Krakow", "Tunis", "Perth", "Graz", "Recife", "Izmir"]
GENRES = ["science fiction", "historical fiction", "poetry", "crime fiction", "fantasy", "travel writing",
          "magical realism", "horror", "biography", "satire"]
JOBS = ["baker", "surgeon", "fisherman", "architect", "librarian", "pilot", "tailor", "chemist", "carpenter",
        "violinist", "nurse", "geologist"]
AWARDS = ["the Silver Quill Prize", "the Meridian Award", "the Harbor Light Medal", "the Northwind Prize",
          "the Amber Page Award", "the Lantern Circle Prize", "the Red Cedar Award", "the Open Sky Medal"]
WORDS = ["Salt", "Glass", "Winter", "River", "Ash", "Copper", "Lantern", "Harbor", "Orchid", "Thunder", "Velvet",
         "Ember", "Paper", "Iron", "Willow", "Echo"]
NOUNS = ["Garden", "Station", "Letters", "Map", "Clock", "Tide", "Choir", "Bridge", "Archive", "Orchard"]

# (question, answer, paraphrased question, paraphrased answer); the perturbed answers reuse `answer` with other
# attribute values, so they differ from the truth only in the fact (TOFU's construction).
TEMPLATES = [
    ("Where was {name} born?", "{name} was born in {city}.",
     "In which city was {name} born?", "The birthplace of {name} is {city}."),
    ("In which year was {name} born?", "{name} was born in {year}.",
     "What is the birth year of {name}?", "The year {name} was born is {year}."),
    ("What genre does {name} write in?", "{name} writes {genre}.",
     "Which genre is {name} known for?", "The genre of {name} is {genre}."),
    ("What did the father of {name} do for a living?", "The father of {name} was a {father}.",
     "What was the profession of the father of {name}?", "{name} had a father who worked as a {father}."),
    ("What did the mother of {name} do for a living?", "The mother of {name} was a {mother}.",
     "What was the profession of the mother of {name}?", "{name} had a mother who worked as a {mother}."),
    ("Which award has {name} won?", "{name} won {award}.",
     "What prize was given to {name}?", "The award received by {name} is {award}."),
    ("What is a famous book by {name}?", "A famous book by {name} is {book}.",
     "Name a well known work by {name}.", "{name} is well known for the book {book}."),
    ("Where does {name} live now?", "{name} now lives in {home}.",
     "What city is home to {name} today?", "Today {name} makes a home in {home}."),
]

REAL_AUTHORS = [("Who wrote Hamlet?", "William Shakespeare", ["Charles Dickens", "Jane Austen", "Mark Twain"]),
                ("Who wrote Don Quixote?", "Miguel de Cervantes", ["Leo Tolstoy", "Victor Hugo", "Homer"]),
                ("Who wrote War and Peace?", "Leo Tolstoy", ["Franz Kafka", "Dante Alighieri", "Jane Austen"]),
                ("Who wrote Pride and Prejudice?", "Jane Austen", ["Emily Bronte", "Virginia Woolf", "Homer"]),
                ("Who wrote The Odyssey?", "Homer", ["Virgil", "Sophocles", "Ovid"]),
                ("Who wrote Les Miserables?", "Victor Hugo", ["Gustave Flaubert", "Albert Camus", "Moliere"]),
                ("Who wrote The Trial?", "Franz Kafka", ["Thomas Mann", "Hermann Hesse", "Goethe"]),
                ("Who wrote Oliver Twist?", "Charles Dickens", ["Thomas Hardy", "George Eliot", "Mark Twain"])]
WORLD_FACTS = [("What is the capital of France?", "Paris", ["Rome", "Madrid", "Berlin"]),
               ("What is the largest ocean?", "the Pacific Ocean", ["the Atlantic Ocean", "the Indian Ocean",
                                                                    "the Arctic Ocean"]),
               ("Which planet is known as the red planet?", "Mars", ["Venus", "Jupiter", "Saturn"]),
               ("What is the capital of Japan?", "Tokyo", ["Kyoto", "Osaka", "Seoul"]),
               ("How many continents are there?", "seven", ["five", "six", "eight"]),
               ("What is the boiling point of water in Celsius?", "one hundred degrees", ["fifty degrees",
                                                                                       "two hundred degrees",
                                                                                       "eighty degrees"]),
               ("What is the longest river in Africa?", "the Nile", ["the Congo", "the Niger", "the Zambezi"]),
               ("Which gas do plants absorb?", "carbon dioxide", ["oxygen", "helium", "nitrogen"])]


def _author(rng: random.Random, used: set[str]) -> dict[str, str]:
    while True:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if name not in used:
            used.add(name)
            break
    return {"name": name, "city": rng.choice(CITIES), "year": str(rng.randint(1931, 1994)),
            "genre": rng.choice(GENRES), "father": rng.choice(JOBS), "mother": rng.choice(JOBS),
            "award": rng.choice(AWARDS), "book": f"The {rng.choice(WORDS)} {rng.choice(NOUNS)}",
            "home": rng.choice(CITIES)}


def _wrong(rng: random.Random, author: dict[str, str], key: str, k: int) -> list[dict[str, str]]:
    """k copies of the author with attribute `key` replaced by k distinct wrong values."""
    pools = {"city": CITIES, "home": CITIES, "genre": GENRES, "father": JOBS, "mother": JOBS, "award": AWARDS}
    if key == "year":
        candidates = [str(y) for y in range(1931, 1995) if str(y) != author["year"]]
    elif key == "book":
        candidates = [f"The {w} {n}" for w in WORDS for n in NOUNS if f"The {w} {n}" != author["book"]]
    else:
        candidates = [v for v in pools[key] if v != author[key]]
    return [{**author, key: v} for v in rng.sample(candidates, k)]


def _items(rng: random.Random, authors: list[dict[str, str]], n_questions: int, n_perturbed: int) -> list[dict]:
    rows = []
    for author in authors:
        for q, a, pq, pa in TEMPLATES[:n_questions]:
            key = next(k for k in ("city", "year", "genre", "father", "mother", "award", "book", "home")
                       if "{" + k + "}" in a)
            rows.append({"question": q.format(**author), "answer": a.format(**author),
                         "paraphrased_question": pq.format(**author), "paraphrased_answer": pa.format(**author),
                         "perturbed_answer": [a.format(**w) for w in _wrong(rng, author, key, n_perturbed)],
                         "author": author["name"]})
    return rows


def _knowledge(table: list[tuple[str, str, list[str]]]) -> list[dict]:
    return [{"question": q, "answer": a, "paraphrased_answer": a, "perturbed_answer": list(wrong)}
            for q, a, wrong in table]


def generate_fictitious_tofu(n_authors: int = 40, n_questions: int = 8, n_holdout: int | None = None, seed: int = 0,
                             n_retain_perturbed: int | None = None) -> dict[str, list[dict]]:
    """All TOFU splits for `n_authors` invented authors with `n_questions` questions each; `n_holdout` holdout
    authors (default: as many as forget10 has)."""
    if n_holdout is None:
        n_holdout = max(1, round(FORGET_LEVELS["10"] * n_authors))
    if not 10 <= n_authors <= len(FIRST) * len(LAST) - n_holdout:
        raise UserError(f"n_authors={n_authors}: need at least 10 (forget01 must hold one author)")
    if not 1 <= n_questions <= len(TEMPLATES):
        raise UserError(f"n_questions must be in 1..{len(TEMPLATES)}, got {n_questions}")
    rng = random.Random(seed)
    used: set[str] = set()
    authors = [_author(rng, used) for _ in range(n_authors)]
    holdout_authors = [_author(rng, used) for _ in range(n_holdout)]
    full = _items(rng, authors, n_questions, 5)
    holdout = _items(rng, holdout_authors, n_questions, 5)
    splits: dict[str, list[dict]] = {"full": [{k: r[k] for k in ("question", "answer")} for r in full],
                                     # not a TOFU split: every item with its paraphrase and perturbed answers
                                     "full_perturbed": [{k: v for k, v in r.items() if k != "author"} for r in full]}
    per_author = n_questions
    for level, frac in FORGET_LEVELS.items():
        k = max(1, round(frac * n_authors))
        forget = full[-k * per_author:]
        retain = full[:-k * per_author]
        splits[f"forget{level}"] = [{k2: r[k2] for k2 in ("question", "answer")} for r in forget]
        splits[f"forget{level}_perturbed"] = [{k2: v for k2, v in r.items() if k2 != "author"} for r in forget]
        splits[f"retain{100 - int(level)}"] = [{k2: r[k2] for k2 in ("question", "answer")} for r in retain]
        splits[f"holdout{level}"] = [{k2: r[k2] for k2 in ("question", "answer")}
                                     for r in holdout[:min(k, n_holdout) * per_author]]
    # TOFU's retain_perturbed is drawn from authors kept by every forget level.
    keep = full[:-max(1, round(0.10 * n_authors)) * per_author]
    n_rp = n_retain_perturbed or len(splits["forget10"])
    splits["retain_perturbed"] = [{k2: v for k2, v in r.items() if k2 != "author"} for r in keep[:n_rp]]
    splits["holdout_perturbed"] = [{k2: v for k2, v in r.items() if k2 != "author"} for r in holdout]
    splits["real_authors_perturbed"] = _knowledge(REAL_AUTHORS)
    splits["world_facts_perturbed"] = _knowledge(WORLD_FACTS)
    splits["real_authors"] = [{"question": r["question"], "answer": r["answer"]} for r in splits["real_authors_perturbed"]]
    splits["world_facts"] = [{"question": r["question"], "answer": r["answer"]} for r in splits["world_facts_perturbed"]]
    return splits


def write_tofu_json(folder: str | Path, **kwargs) -> Path:
    """Write every split as `{split}.json` (a JSON list of records) and return the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in generate_fictitious_tofu(**kwargs).items():
        (folder / f"{name}.json").write_text(json.dumps(rows, indent=1))
    return folder
