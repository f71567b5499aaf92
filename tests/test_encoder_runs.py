"""The encoder's tasks end to end through the one run pipeline and the commands: ``train --task mlm`` (resumed
exactly), ``--task classify`` from scratch and ``--init-from`` the masked language model, ``--task tag``,
``evaluate``, ``classify``, ``dotformer.load(...).classify``, ``POST /api/classify``, ``export --to onnx``, the
encoder's attention maps (``plot attention``, the explorer's data), and the one-line errors of bad data."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from encoder_support import ANIMALS, PLACES, encoder_toml, sentence

from dotformer.cli import main

MODEL = encoder_toml(eval_every=0)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A text, labelled texts (animals or places), tagged sentences (ANIMAL / PLACE / O words) and a config."""
    root = tmp_path_factory.mktemp("encoder")
    rng = random.Random(0)
    text = [sentence(rng, ANIMALS + PLACES) for _ in range(400)]
    (root / "text.txt").write_text("\n".join(text) + "\n")
    rows = [(sentence(rng, ANIMALS), "animal") if i % 2 else (sentence(rng, PLACES), "place") for i in range(300)]
    (root / "labels.tsv").write_text("".join(f"{t}\t{label}\n" for t, label in rows))
    (root / "labels_test.tsv").write_text("".join(f"{t}\t{label}\n" for t, label in rows[:40]))
    sentences = []
    for _ in range(200):
        words = sentence(rng, ANIMALS + PLACES).split()
        tags = ["ANIMAL" if w in ANIMALS else "PLACE" if w in PLACES else "O" for w in words]
        sentences.append("\n".join(f"{w} X {t}" for w, t in zip(words, tags, strict=True)))
    (root / "tags.conll").write_text("\n\n".join(sentences) + "\n")
    (root / "tiny.toml").write_text(MODEL)
    return {name: root / name for name in ("text.txt", "labels.tsv", "labels_test.tsv", "tags.conll", "tiny.toml")}


def run(*argv: str) -> int:
    torch.set_num_threads(1)
    return main([str(a) for a in argv])


def train(files: dict[str, Path], out: Path, task: str, data: str, *extra: Any) -> None:
    common = ["--config", files["tiny.toml"], "--no-progress", "--tokenizer", "char"]
    assert run("train", "--task", task, "--data", files[data], "--out", out, *common, *extra) == 0


@pytest.fixture(scope="module")
def mlm(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "mlm"
    train(files, out, "mlm", "text.txt", "--max-steps", "40", "--block-size", "48")
    return out


def test_a_masked_language_model_trains_and_evaluates(mlm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = json.loads((mlm / "run.json").read_text())
    assert record["task"] == "mlm" and record["model"]["arch"] == "encoder-only"
    assert record["model"]["head"] == "generator" and record["data"]["mask_probability"] == 0.15
    metrics = [json.loads(line) for line in (mlm / "metrics.jsonl").read_text().splitlines()]
    losses = [m["loss"] for m in metrics if m["split"] == "train"]
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3  # it learns which characters stand where
    capsys.readouterr()
    assert run("evaluate", "--checkpoint", mlm, "--split", "test", "--json", mlm / "test.json") == 0
    out = capsys.readouterr().out
    assert "masked-token accuracy" in out and "perplexity" in out
    score = json.loads((mlm / "test.json").read_text())
    assert score["masked"] > 0 and 0.0 <= score["accuracy"] <= 100.0 and score["accuracy"] > 100 / 40  # > chance
    assert score["perplexity"] == pytest.approx(np.exp(score["nll"] / score["masked"]))
    assert score["seed"] == 1 and "masking seed 1)" in out  # the JSON names the masking's seed, as the line does
    assert run("evaluate", "--checkpoint", mlm, "--split", "test", "--seed", "2", "--json", mlm / "seed2.json") == 0
    assert "masking seed 2)" in capsys.readouterr().out  # --seed seeds the masking, as evaluate --help says
    reseeded = json.loads((mlm / "seed2.json").read_text())
    assert reseeded["seed"] == 2 and reseeded["nll"] != score["nll"]  # another draw of the masked positions


def test_a_masked_language_model_resumes_exactly(files: dict[str, Path], tmp_path: Path) -> None:
    from dotformer.checkpoint import load_weights

    flags = ("--block-size", "48", "--save-every", "3", "--limit", "120")
    train(files, tmp_path / "once", "mlm", "text.txt", "--max-steps", "6", *flags)
    train(files, tmp_path / "twice", "mlm", "text.txt", "--max-steps", "3", *flags)
    assert run("train", "--out", tmp_path / "twice", "--resume", "--max-steps", "6", "--no-progress") == 0
    once, twice = (load_weights(tmp_path / run_dir / "last" / "model.safetensors") for run_dir in ("once", "twice"))
    assert all(torch.equal(once[name], twice[name]) for name in once)


@pytest.fixture(scope="module")
def classifier(files: dict[str, Path], mlm: Path) -> Path:
    out = mlm.parent / "cls"
    extra = ("--max-steps", "60", "--test", files["labels_test.tsv"], "--init-from", mlm, "--pooling", "mean")
    train(files, out, "classify", "labels.tsv", *extra)
    return out


def test_a_classifier_fine_tuned_from_the_masked_language_model(
    classifier: Path, mlm: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    record = json.loads((classifier / "run.json").read_text())
    assert record["model"]["head"] == "sequence" and record["model"]["num_labels"] == 2
    assert record["model"]["pooling"] == "mean" and record["init_from"] == str(mlm / "best")
    info = json.loads((classifier / "last" / "config.json").read_text())
    assert info["labels"] == ["animal", "place"] and info["init_from"] == str(mlm / "best")
    from dotformer.checkpoint import load_weights

    encoder, tuned = (
        load_weights(mlm / "best" / "model.safetensors"),
        load_weights(classifier / "last" / "model.safetensors"),
    )
    assert set(tuned) - set(encoder) == {
        "classifier.proj.weight",
        "classifier.proj.bias",
    }  # a fresh head on its encoder
    capsys.readouterr()
    assert run("evaluate", "--checkpoint", classifier, "--json", classifier / "test.json") == 0
    out = capsys.readouterr().out
    assert "accuracy" in out and "macro-F1" in out
    metrics = json.loads((classifier / "test.json").read_text())["metrics"]
    assert metrics["count"] == 40 and metrics["accuracy"] >= 90.0 and metrics["macro_f1"] >= 90.0
    for seed in ("1", "2"):  # --limit N scores a sample of N texts drawn with --seed
        assert (
            run(
                "evaluate", "--checkpoint", classifier, "--limit", "10", "--seed", seed, "--json", classifier / "s.json"
            )
            == 0
        )
        assert json.loads((classifier / "s.json").read_text())["seed"] == int(seed)
    capsys.readouterr()
    test = str(files["labels_test.tsv"])  # the reader flags of pairs are refused by name, not silently ignored
    assert run("evaluate", "--checkpoint", classifier, "--data", test, "--delimiter", ",") == 2
    assert capsys.readouterr().err == (
        "dotformer evaluate: error: --delimiter sets how a file of pairs is read; a classifier's evaluation reads its "
        "--data file as its own kind of data: leave it out\n"
    )


def test_classify_from_python_the_command_and_the_server(classifier: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import dotformer

    model = dotformer.load(classifier, device="cpu")
    one = model.classify("the cat and the dog")
    assert one.label == "animal" and one.probability == max(one.probabilities.values())
    assert sum(one.probabilities.values()) == pytest.approx(1.0)
    both = model.classify(["the cat and the dog", "near the river by the sea"])
    assert [r.label for r in both] == ["animal", "place"]
    capsys.readouterr()
    assert run("classify", "--checkpoint", classifier, "the cat and the dog", "near the river by the sea") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["animal", "place"]
    assert float(lines[0].split("\t")[1]) == pytest.approx(both[0].probability, abs=1e-4)
    import asyncio

    from dotformer.api.endpoint import classify_request
    from dotformer.api.web import RequestError

    reply = asyncio.run(classify_request(model, {"texts": ["the cat and the dog"]}))
    assert reply["results"][0]["label"] == "animal"
    for bad, message in (({"texts": []}, "non-empty"), ({"texts": ["a"], "beam": 2}, "unknown field"), ([1], "object")):
        with pytest.raises(RequestError, match=message):
            asyncio.run(classify_request(model, bad))


def test_post_api_classify(classifier: Path) -> None:
    pytest.importorskip("aiohttp")
    import http.client

    import dotformer
    from dotformer.api.serve import TranslationServer

    with TranslationServer(dotformer.load(classifier, device="cpu"), port=0) as server:
        assert server.url.endswith("/api/classify")
        host, port = server.server_address
        connection = http.client.HTTPConnection(host, port, timeout=30)
        connection.request("POST", "/api/classify", json.dumps({"texts": ["a horse near the cow"]}),
                           {"Content-Type": "application/json"})  # fmt: skip
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["results"][0]["label"] == "animal"
        connection.request("POST", "/api/classify", json.dumps({"texts": "a horse"}))
        response = connection.getresponse()
        assert response.status == 400 and "non-empty list of strings" in json.loads(response.read())["error"]


def test_a_classifier_exports_to_onnx(classifier: Path, tmp_path: Path) -> None:
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from dotformer.checkpoint import load_checkpoint
    from dotformer.imports.bert import bert_inputs

    assert run("export", classifier, tmp_path / "onnx", "--to", "onnx") == 0
    description = json.loads((tmp_path / "onnx" / "onnx_config.json").read_text())
    assert description["labels"] == ["animal", "place"] and description["head"] == "sequence"
    loaded = load_checkpoint(classifier)
    src = bert_inputs(loaded.src_tokenizer, ["a cat", "near the river by the old road", "the"])  # (3, S) padded
    session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    (logits,) = session.run(["logits"], {"src": src.numpy()})
    np.testing.assert_allclose(logits, loaded.model(src).detach().numpy(), atol=1e-5)


def test_a_tagger_learns_a_label_per_word(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import dotformer

    out = tmp_path / "tag"
    split = ("--valid-fraction", "0.1", "--test-fraction", "0.1")
    train(files, out, "tag", "tags.conll", "--max-steps", "100", *split, "--tokenizer", "bpe", "--vocab-size", "300")
    capsys.readouterr()
    assert run("evaluate", "--checkpoint", out, "--json", out / "test.json") == 0
    metrics = json.loads((out / "test.json").read_text())["metrics"]
    assert metrics["f1_by"] == "labels" and metrics["accuracy"] >= 90.0
    tagging = dotformer.load(out, device="cpu").classify("the cat near the river")
    assert tagging.words == ["the", "cat", "near", "the", "river"]
    assert tagging.labels == ["O", "ANIMAL", "O", "O", "PLACE"]
    capsys.readouterr()
    assert run("classify", "--checkpoint", out, "a dog by the sea") == 0
    assert capsys.readouterr().out == "a dog by the sea\tO ANIMAL O O PLACE\n"


@pytest.mark.parametrize(
    ("task", "content", "extra", "message"),
    [
        ("classify", "the cat\tanimal\nthe dog\tanimal\n", (), "1 label(s) (animal); need 2 or more"),
        ("classify", "the cat\tanimal\nno tab\n", (), "labels.tsv:2: 0 tabs"),
        ("classify", "a\tx\nb\ty\n" * 20, ("--test", "TEST"), "label 'z' is not among the training labels"),
        ("tag", "John\tB-PER O\n", (), "tags.tsv:1: 1 words and 2 labels"),
        ("mlm", "some text\n" * 50, ("--tag-format", "conll"), "tag_format (--tag-format) is for --task tag"),
        (
            "classify",
            "a\tx\nb\ty\n" * 20,
            ("--init-from", "RUN"),
            "an encoder task's --init-from needs an encoder-only",
        ),
    ],
)
def test_bad_data_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], task: str, content: str, extra: tuple[str, ...], message: str
) -> None:
    name = {"classify": "labels.tsv", "tag": "tags.tsv", "mlm": "text.txt"}[task]
    (tmp_path / name).write_text(content)
    (tmp_path / "test.tsv").write_text("c\tz\n")
    pairs = tmp_path / "pairs"
    if "RUN" in extra:  # an encoder-decoder checkpoint
        (tmp_path / "p.tsv").write_text("ab\tba\n" * 30)
        assert run("train", "--data", tmp_path / "p.tsv", "--out", pairs, "--preset", "tiny", "--max-steps", "1",
                   "--no-progress") == 0  # fmt: skip
    argv = [{"TEST": tmp_path / "test.tsv", "RUN": pairs}.get(a, a) for a in extra]
    capsys.readouterr()
    status = run("train", "--task", task, "--data", tmp_path / name, "--out", tmp_path / "run", "--max-steps", "2",
                 "--no-progress", *argv)  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()  # a run that failed before its first checkpoint leaves nothing


def test_warnings_of_classify_are_one_per_call(classifier: Path) -> None:
    import dotformer
    from dotformer.decoding.inputs import UnknownTokenWarning

    model = dotformer.load(classifier, device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.classify(["the cat \U0001f600"] * 5 + ["the dog"])
    assert [str(w.message).split(" input")[0] for w in caught if w.category is UnknownTokenWarning] == ["5"]


@pytest.mark.numerical
def test_an_encoders_attention_maps_read_both_sides(
    mlm: Path, classifier: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dotformer.checkpoint import load_checkpoint
    from dotformer.decoding.attention_maps import encoder_attention_weights
    from dotformer.explore.data import example_json, write_page

    loaded = load_checkpoint(mlm, device="cpu")
    maps = encoder_attention_weights(loaded, "the cat")
    assert maps.encoder.shape == (2, 2, 9, 9) and maps.src_tokens == ["<s>", *"the\u2423cat", "</s>"]  # a visible space
    assert maps.decoder_self.shape == (2, 2, 0, 0) and maps.cross.shape == (2, 2, 0, 9)
    ids = torch.tensor([[1, *loaded.src_tokenizer.encode("the cat"), 2]])
    with torch.no_grad():
        expected = loaded.model.encode(ids, need_weights=True).self_weights
    for layer, weights in enumerate(expected):  # the same softmax of the same sums: float32 rounding at most
        np.testing.assert_allclose(maps.encoder[layer], weights[0].numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(maps.encoder.sum(-1), 1.0, atol=1e-5)
    after = np.triu(maps.encoder, k=1).sum(axis=(-1, -2))  # (L, H): the weight each head puts after its queries
    assert np.all(after > 0.1)  # no causal mask: every head reads the tokens after each query too
    assert maps.output_text == "the cat" and len(maps.out_tokens) == 9  # no mask in the text: the text, and a guess

    labelled = encoder_attention_weights(load_checkpoint(classifier, device="cpu"), "the cat near the hill")
    first, second = labelled.output_text.split("; ")  # every label with its probability, the likeliest first
    (label, probability), (other, rest) = first.split(" "), second.split(" ")
    assert {label, other} == {"animal", "place"} and 0.5 <= float(probability.strip("()")) <= 1.0
    assert float(probability.strip("()")) + float(rest.strip("()")) == pytest.approx(1.0, abs=2e-3)
    assert labelled.out_tokens == []

    out = tmp_path / "encoder.png"
    assert run("plot", "attention", "--checkpoint", classifier, "the cat", "--out", out) == 0
    assert out.is_file() and "(4 maps)" in capsys.readouterr().out  # 2 layers x 2 heads
    assert run("plot", "attention", "--checkpoint", classifier, "cat", "--target", "x", "--out", out) == 2
    assert "is an encoder: it reads one text, so --target does not apply" in capsys.readouterr().err
    assert run("plot", "attention", "--checkpoint", classifier, "cat", "--kind", "cross", "--out", out) == 2
    assert "its only attention is encoder, not cross (--kind encoder" in capsys.readouterr().err

    data = json.loads(json.dumps(example_json(loaded, "the cat")))
    assert data["encoder"] is True and data["lm"] is False and data["kinds"] == ["encoder"] and data["steps"] == []
    np.testing.assert_allclose(np.array(data["maps"]["encoder"]), maps.encoder, atol=5e-5)  # 4 decimals on the page
    page = write_page(loaded, ["the cat"], tmp_path / "page.html").read_text(encoding="utf-8")
    assert '"encoder": true' in page and "an encoder (encoder only, head: generator)" in page


def test_classify_writes_its_output_file(classifier: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat and the dog\nnear the river by the sea\n")
    out = tmp_path / "out" / "labels.jsonl"
    flags = ("--input", texts, "--output-format", "jsonl", "--output", out)  # as translate and embed
    assert run("classify", "--checkpoint", classifier, *flags) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(row["id"], row["text"], row["label"]) for row in rows] == [
        (0, "the cat and the dog", "animal"),
        (1, "near the river by the sea", "place"),
    ]
    assert run("classify", "--checkpoint", classifier, "--output", tmp_path / "one.txt", "a small goat") == 0
    assert (tmp_path / "one.txt").read_text().split("\t")[0] == "animal"
    capsys.readouterr()
    assert run("classify", "--checkpoint", classifier, "--input", texts, "--output", texts) == 2
    assert "--output" in capsys.readouterr().err and texts.read_text().startswith("the cat")  # the input is kept
    assert run("classify", "--checkpoint", classifier, "a dog", "a\udcff") == 2  # a shell's non-UTF-8 bytes
    assert capsys.readouterr().err == (
        "dotformer classify: error: input 2: byte 0xff at byte offset 1 is not valid UTF-8 (invalid start byte)\n"
    )


@pytest.mark.parametrize("typed", ["<mask>", "[MASK]"])
def test_a_mask_typed_in_the_text_reaches_the_mask_token(mlm: Path, typed: str) -> None:
    """``explore`` and ``plot attention`` read the text through encoder_attention_weights: ``<mask>`` or ``[MASK]``
    typed there is the mask token (one position, filled by the model), not the pieces of its letters."""
    from dotformer.checkpoint import load_checkpoint
    from dotformer.decoding.attention_maps import encoder_attention_weights
    from dotformer.decoding.inputs import encode_with_masks

    loaded = load_checkpoint(mlm, device="cpu")
    tokenizer = loaded.src_tokenizer
    ids = encode_with_masks(tokenizer, f"the {typed} and a dog")
    assert ids == [*tokenizer.encode("the "), tokenizer.mask_id, *tokenizer.encode(" and a dog")]
    maps = encoder_attention_weights(loaded, f"the {typed} and a dog")
    assert maps.src_tokens == ["<s>", *"the\u2423", "<mask>", *"\u2423and\u2423a\u2423dog", "</s>"]
    filled = maps.output_text
    assert len(filled) == len("the x and a dog") and filled.startswith("the ") and filled.endswith(" and a dog")
    assert filled[4] == maps.out_tokens[5].replace("\u2423", " ")  # the model's guess at the mask's position
