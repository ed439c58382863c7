"""OwnData reads the user's files in every format the ecosystem uses and maps their columns, checked against an
independent reading of the same records (pandas, csv, datasets); TOFU's release is one spec of it (the same rows as
TofuSource); a row with an empty question is a plain document, trained and scored on every token."""

from __future__ import annotations

import json

import pytest

from lit_unlearn.core.errors import UserError
from lit_unlearn.data.own_data import OwnData, nearest_level, overlap
from lit_unlearn.data.tofu_source import tofu_layout

ROWS = [{"q": f"Who wrote book {i}?", "a": f"Author number {i} wrote it.", "who": f"author{i % 3}"} for i in range(30)]


def _write(folder, fmt, rows, name):
    import pandas as pd

    path = folder / f"{name}.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "csv":
        pd.DataFrame(rows).to_csv(path, index=False)
    elif fmt == "parquet":
        pd.DataFrame(rows).to_parquet(path)
    else:
        import datasets

        path = folder / name
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv", "parquet", "saved"])
def test_every_file_format_gives_the_records_with_the_column_map_applied(tmp_path, fmt):
    forget = _write(tmp_path, fmt, ROWS[:10], "f")
    retain = _write(tmp_path, fmt, ROWS[10:], "r")
    source = OwnData(forget=str(forget), retain=str(retain), columns={"question": "q", "answer": "a", "group": "who"})
    assert source.check() == [n for n in source.check()]  # idempotent, read once
    rows, kept = source.forget_retain()
    assert [(r["question"], r["answer"], r["author"]) for r in rows] == [(r["q"], r["a"], r["who"]) for r in ROWS[:10]]
    assert len(kept) == 20


def test_chat_and_text_formats_become_qa_rows_and_documents(tmp_path):
    from lit_unlearn.data import QAFormatter, train_bpe_tokenizer

    chats = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": r["q"]},
                           {"role": "assistant", "content": r["a"]}]} for r in ROWS]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(c) + "\n" for c in chats))
    (tmp_path / "d.csv").write_text("body\n" + "\n".join(f'"{r["q"]} {r["a"]}"' for r in ROWS) + "\n")
    source = OwnData(forget={"path": str(tmp_path / "c.jsonl"), "format": "chat"},
                     retain={"path": str(tmp_path / "d.csv"), "format": "text", "columns": {"text": "body"}})
    forget, retain = source.forget_retain()
    assert forget[0]["question"] == "system: Be brief.\n" + ROWS[0]["q"] and forget[0]["answer"] == ROWS[0]["a"]
    assert retain[0] == {"question": "", "answer": f"{ROWS[0]['q']} {ROWS[0]['a']}", "author": "block0"}
    tok = train_bpe_tokenizer([r["q"] + " " + r["a"] for r in ROWS], tmp_path / "tok", vocab_size=300)
    item = QAFormatter(tok).encode("", retain[0]["answer"])
    body = tok(retain[0]["answer"], add_special_tokens=False)["input_ids"]
    assert item["input_ids"].tolist() == [tok.bos_token_id, *body, tok.eos_token_id]
    assert item["labels"].tolist() == [-100, *body, tok.eos_token_id]  # every token of a document is trained


def test_overlap_counts_exact_and_normalised_duplicates():
    forget = [{"question": "Who wrote X?", "answer": "A."}, {"question": "who  wrote Y", "answer": "B"},
              {"question": "Z?", "answer": "C"}]
    retain = [{"question": "Who wrote X?", "answer": "A."}, {"question": "Who wrote Y?", "answer": "B."}]
    assert overlap(forget, retain) == (1, 1, forget[0])
    assert overlap(forget[2:], retain) == (0, 0, None)


def test_the_tofu_release_is_one_spec_of_it(tmp_path):
    from lit_unlearn.data import TofuSource
    from lit_unlearn.data.tofu_release import load_release

    release = load_release()
    for split in ("forget01", "retain99", "holdout01", "forget01_perturbed", "retain_perturbed"):
        (tmp_path / f"{split}.json").write_text(json.dumps(release[split]))
    own = OwnData(**tofu_layout(tmp_path, "01"))
    tofu = TofuSource(str(tmp_path), "01")
    strip = lambda rows: [{k: v for k, v in r.items() if k != "author"} for r in rows]  # noqa: E731
    assert strip(own.forget_retain()[0]) == tofu.forget_retain()[0]
    assert strip(own.eval_splits()["forget"]) == tofu.eval_splits()["forget"]
    assert [r["author"] for r in own.rows("forget")] == [f"block{i // 20}" for i in range(40)]  # TOFU's 20 per author
    assert own.forget_level == "01" and nearest_level(150) == "05" and nearest_level(5000) == "10"


@pytest.mark.parametrize("spec, needle", [
    ({"forget": {"path": "x.jsonl", "colums": {}}}, "unknown key(s) ['colums']"),
    ({"format": "docs"}, "format 'docs'"),
    ({"columns": {"prompt": "q"}}, "names ['prompt']"),
])
def test_a_misstated_spec_is_one_line(tmp_path, spec, needle):
    base = {"forget": str(tmp_path / "f.jsonl"), "retain": str(tmp_path / "r.jsonl"), **spec}
    with pytest.raises(UserError) as err:
        OwnData(**base)
    assert needle in str(err.value)


def test_a_holdout_item_the_model_saw_is_refused(tmp_path):
    forget = _write(tmp_path, "jsonl", ROWS[:10], "f")
    retain = _write(tmp_path, "jsonl", ROWS[10:20], "r")
    holdout = _write(tmp_path, "jsonl", ROWS[20:] + ROWS[12:13], "h")  # one retain item among them
    qa = {"question": "q", "answer": "a"}
    source = OwnData(forget=str(forget), retain=str(retain), holdout=str(holdout), columns=qa)
    with pytest.raises(UserError) as err:
        source.check()
    assert "1 holdout item(s) also stand in the forget or retain set" in str(err.value)
    clean = _write(tmp_path, "jsonl", ROWS[20:], "h2")
    assert OwnData(forget=str(forget), retain=str(retain), holdout=str(clean), columns=qa).check() is not None
