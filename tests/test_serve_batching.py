"""The batcher between ``dotformer serve``'s requests and the engine: the texts of concurrent requests are decoded in
shared engine calls, and every client still gets exactly what ``dotformer translate`` gives for its inputs and
options, on both engines; requests with other options are never mixed; a cancelled request's texts leave the queue;
a large request is split so that small ones ride beside it.

Every wait is bounded in time; no assertion depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import Cli

from dotformer import ModelConfig, Transformer
from dotformer.checkpoint import save_checkpoint
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.engines.choice import ctranslate2_installed

TIMEOUT_S = 60
SYMBOLS = "a1 a2 a3 a4 a5 a6 a7 a8 a9"
ENGINES = [
    "torch",
    pytest.param("ctranslate2", marks=pytest.mark.skipif(not ctranslate2_installed(), reason="needs ctranslate2")),
]


# -- the batcher alone ------------------------------------------------------------------------------------------------


class Held:
    """A first request whose engine call holds the model's thread until released, so that the requests sent
    meanwhile queue in the batcher as they would behind a long call."""

    def __init__(self) -> None:
        self.running, self.release = threading.Event(), threading.Event()

    def run(self, items: list[str]) -> list[str]:
        self.running.set()
        self.release.wait(TIMEOUT_S)
        return items

    async def start(self, batcher: Any) -> asyncio.Future[Any]:
        future = asyncio.ensure_future(batcher.submit("held", ["held"], [1], self.run))
        assert await asyncio.to_thread(self.running.wait, TIMEOUT_S)
        return future


def recording() -> tuple[list[list[str]], Callable[[list[str]], list[str]]]:
    """An engine call that returns its items, and the list of the calls it was given."""
    calls: list[list[str]] = []

    def run(items: list[str]) -> list[str]:
        calls.append(list(items))
        return items

    return calls, run


async def until_waiting(batcher: Any, sentences: int) -> None:
    """Until ``sentences`` are queued in the batcher (a bounded wait)."""
    for _ in range(1000):
        if batcher.waiting == sentences:
            return
        await asyncio.sleep(0.002)


def run_batcher(jobs: list[tuple[Any, list[str], list[int], bool]], max_tokens: int) -> tuple[list[Any], list[Any]]:
    """Submit every job while the model is held, then release it; returns each job's results and the calls made
    (each a list of (key, item))."""
    from dotformer.api.batcher import Batcher
    from dotformer.api.turns import ModelTurns

    calls: list[list[tuple[Any, str]]] = []

    def runner(key: Any) -> Any:
        def run(items: list[str]) -> list[str]:
            calls.append([(key, item) for item in items])
            return [item.upper() for item in items]

        return run

    async def main() -> list[Any]:
        turns = ModelTurns()
        batcher = Batcher(turns, max_tokens=max_tokens, max_wait_s=0.0)
        held = Held()
        try:
            first = await held.start(batcher)
            futures = [
                asyncio.ensure_future(batcher.submit(key, items, sizes, runner(key), whole))
                for key, items, sizes, whole in jobs
            ]
            await until_waiting(batcher, sum(len(items) for _, items, _, _ in jobs))
            held.release.set()
            await first
            return list(await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT_S))
        finally:
            batcher.close()
            turns.close()

    return asyncio.run(main()), calls


def test_results_come_back_in_order_and_keys_are_never_mixed() -> None:
    jobs = [
        ("beam", ["b", "a", "c"], [3, 1, 2], False),
        ("greedy", ["x", "y"], [1, 1], False),
        ("beam", ["d"], [5], False),
    ]
    results, calls = run_batcher(jobs, max_tokens=100)
    assert results == [["B", "A", "C"], ["X", "Y"], ["D"]]
    assert all(len({key for key, _ in call}) == 1 for call in calls)
    beam_call = next(call for call in calls if call[0][0] == "beam")
    assert [item for _, item in beam_call] == ["a", "c", "b", "d"]  # both beam requests in one call, by size


def test_a_large_request_is_split_and_small_ones_ride_beside_it() -> None:
    jobs = [("k", [f"l{i}" for i in range(6)], [4] * 6, False), ("k", ["s"], [4], False)]
    results, calls = run_batcher(jobs, max_tokens=8)
    assert results[1] == ["S"] and len(results[0]) == 6
    assert [item for _, item in calls[0]] == ["l0", "s"]  # one text of each request, in turn
    assert all(sum(4 for _ in call) <= 8 for call in calls)


def test_a_whole_request_is_one_call_alone_even_above_the_budget() -> None:
    jobs = [("sample", ["p", "q", "r"], [10, 10, 10], True), ("k", ["z"], [1], False)]
    results, calls = run_batcher(jobs, max_tokens=8)
    assert results == [["P", "Q", "R"], ["Z"]]
    assert [[item for _, item in call] for call in calls] == [["p", "q", "r"], ["z"]]


def test_a_cancelled_request_leaves_the_queue() -> None:
    from dotformer.api.batcher import Batcher
    from dotformer.api.turns import ModelTurns

    calls, run = recording()

    async def main() -> list[str]:
        turns = ModelTurns()
        batcher = Batcher(turns, max_tokens=100, max_wait_s=0.0)
        held = Held()
        try:
            first = await held.start(batcher)
            gone = asyncio.ensure_future(batcher.submit("k", ["gone1", "gone2"], [1, 1], run))
            kept = asyncio.ensure_future(batcher.submit("k", ["kept"], [1], run))
            await until_waiting(batcher, 3)
            gone.cancel()
            await asyncio.sleep(0)
            assert batcher.waiting == 1
            held.release.set()
            await first
            return await asyncio.wait_for(kept, TIMEOUT_S)
        finally:
            batcher.close()
            turns.close()

    assert asyncio.run(main()) == ["kept"]
    assert calls == [["kept"]]


def test_the_clients_of_a_call_get_the_wait_to_send_again() -> None:
    """With one group, a request that waited through a call does not start the next one at once: the clients just
    answered get ``max_wait`` from the call's end to send their next request, so the two ride together (full
    batches, no alternating halves)."""
    from dotformer.api.batcher import Batcher, BatchStats
    from dotformer.api.turns import ModelTurns

    calls, run = recording()

    async def main() -> list[Any]:
        turns = ModelTurns()
        stats: list[BatchStats] = []
        batcher = Batcher(turns, max_tokens=3, max_wait_s=0.5, groups=1, on_batch=stats.append)
        held = Held()
        try:
            first = await held.start(batcher)
            waited = asyncio.ensure_future(batcher.submit("k", ["waited"], [1], run))
            await asyncio.sleep(0.6)  # longer than max_wait since it arrived
            held.release.set()
            await first  # the held call's client is answered ...
            again = asyncio.ensure_future(batcher.submit("k", ["again"], [1], run))  # ... and sends again at once
            third = asyncio.ensure_future(batcher.submit("k", ["third"], [1], run))  # the budget is now full
            results = await asyncio.wait_for(asyncio.gather(waited, again, third), TIMEOUT_S)
            return [results, stats]
        finally:
            batcher.close()
            turns.close()

    results, stats = asyncio.run(main())
    assert results == [["waited"], ["again"], ["third"]]
    assert calls == [["waited", "again", "third"]]
    assert [s.sentences for s in stats] == [1, 3] and all(s.seconds >= 0 for s in stats)
    assert stats[0].seconds >= 0.5  # the held call's engine time: it ran until released, after the 0.6 s sleep


def test_two_groups_take_turns_without_waiting_for_each_other() -> None:
    """With two groups (CTranslate2's on a CPU), a request that waited through a call starts the next one at once,
    without the client that call answered: one of the two requests on their way is half of them. So two clients'
    calls alternate and neither waits ``max_wait`` (30 s here: each must be answered well before it)."""
    from dotformer.api.batcher import Batcher
    from dotformer.api.turns import ModelTurns

    calls, run = recording()

    async def main() -> list[Any]:
        turns = ModelTurns()
        batcher = Batcher(turns, max_tokens=100, max_wait_s=30.0, groups=2)
        held = Held()
        try:
            first = await held.start(batcher)
            waited = asyncio.ensure_future(batcher.submit("k", ["waited"], [1], run))
            await until_waiting(batcher, 1)
            held.release.set()
            await first  # the held call's client is answered; the waiting request's call starts without it
            waited_result = await asyncio.wait_for(waited, 10)
            again = await asyncio.wait_for(batcher.submit("k", ["again"], [1], run), 10)
            return [waited_result, again]
        finally:
            batcher.close()
            turns.close()

    assert asyncio.run(main()) == [["waited"], ["again"]]
    assert calls == [["waited"], ["again"]]


def test_the_groups_must_be_positive() -> None:
    from dotformer.api.batcher import Batcher
    from dotformer.api.turns import ModelTurns
    from dotformer.errors import ConfigError

    turns = ModelTurns()
    try:
        for groups in (0, -1, 1.5, True):
            with pytest.raises(ConfigError, match="batch groups must be a positive integer"):
                Batcher(turns, groups=groups)  # type: ignore[arg-type]
    finally:
        turns.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_server_takes_its_engines_groups(checkpoint: Path, engine: str) -> None:
    """CTranslate2 on a CPU: two groups (a call's time grows with its sentences); torch: one; the flag overrides."""
    import dotformer
    from dotformer.api.serve import TranslationServer

    translator = dotformer.load(checkpoint, device="cpu", engine=engine)
    assert TranslationServer(translator, port=0).batcher.groups == {"torch": 1, "ctranslate2": 2}[engine]
    assert TranslationServer(translator, port=0, batch_groups=3).batcher.groups == 3


def test_ctranslate2_on_a_gpu_takes_one_group() -> None:
    from dotformer.engines.ct2_translate import CT2Copy

    copy = object.__new__(CT2Copy)  # no model opened: only the device is read
    copy.device = "cuda:0"
    assert copy.batch_groups == 1
    copy.device = "cpu"
    assert copy.batch_groups == 2


def test_a_client_alone_does_not_wait_for_others() -> None:
    """One client sending one request after another: nobody else is on the way, so no call waits ``max_wait``
    (30 s here: each request must be answered well before it)."""
    from dotformer.api.batcher import Batcher
    from dotformer.api.turns import ModelTurns

    async def main() -> list[Any]:
        turns = ModelTurns()
        batcher = Batcher(turns, max_tokens=100, max_wait_s=30.0)
        try:
            return [await asyncio.wait_for(batcher.submit("k", [t], [1], list), 10) for t in ("a", "b", "c")]
        finally:
            batcher.close()
            turns.close()

    assert asyncio.run(main()) == [["a"], ["b"], ["c"]]


# -- a server under concurrent clients, against dotformer translate ----------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random translation model: arbitrary but deterministic outputs of several tokens."""
    symbols = train_tokenizer("symbol", [SYMBOLS])
    torch.manual_seed(11)
    config = ModelConfig.preset("tiny", src_vocab_size=symbols.vocab_size, tgt_vocab_size=symbols.vocab_size)
    path = tmp_path_factory.mktemp("batching") / "ck"
    save_checkpoint(path, Transformer(config).eval(), symbols, symbols, {"task": "synthetic"})
    return path


def inputs() -> list[str]:
    words = SYMBOLS.split()
    return [" ".join(words[(i * 7 + j * 3) % 9] for j in range(1 + i % 6)) for i in range(24)]


OPTION_SETS = {
    "beam": {"beam": 4, "n_best": 2, "max_len_b": 8},
    "greedy": {"strategy": "greedy", "max_len_b": 8},
}
FLAGS = {"beam": ["--beam", "4", "--n-best", "2"], "greedy": ["--strategy", "greedy"]}


def post(url: str, body: Any) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), method="POST")
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("engine", ENGINES)
def test_concurrent_clients_get_what_dotformer_translate_gives(checkpoint: Path, engine: str, cli: Cli) -> None:
    """8 clients at once, each sending single texts and small lists under two option sets: the texts share engine
    calls (a call holds several requests), and every output and score equals dotformer translate's for the same
    inputs and options, on this engine."""
    import dotformer
    from dotformer.api.serve import TranslationServer

    texts = inputs()
    expected: dict[str, list[dict[str, Any]]] = {}
    for name, flags in FLAGS.items():
        result = cli(
            "translate", "--checkpoint", str(checkpoint), "--engine", engine, "--device", "cpu", "--threads", "1",
            "--max-len-b", "8", "--output-format", "json", *flags, stdin="\n".join(texts) + "\n",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        expected[name] = [json.loads(line) for line in result.stdout.splitlines()]

    batches: list[Any] = []
    translator = dotformer.load(checkpoint, device="cpu", engine=engine)
    with TranslationServer(translator, port=0, batch_wait_ms=50.0) as server:
        server.batcher.on_batch = batches.append

        def client(k: int) -> list[tuple[str, int, dict[str, Any]]]:
            name = "beam" if k % 2 else "greedy"
            got = []
            for start in range(k % 3, len(texts), 5):
                indices = [start] if start % 2 else [start, (start + 1) % len(texts), (start + 5) % len(texts)]
                reply = post(server.url, {"texts": [texts[i] for i in indices], **OPTION_SETS[name]})
                got += [(name, i, item) for i, item in zip(indices, reply["translations"], strict=True)]
            return got

        with ThreadPoolExecutor(8) as pool:
            replies = [item for got in pool.map(client, range(8), timeout=TIMEOUT_S) for item in got]
    assert len(replies) > 40
    for name, i, item in replies:
        want = expected[name][i]["hypotheses"]
        got = item.get("hypotheses", [item])
        assert [h["text"] for h in got] == [h["text"] for h in want], (name, i)
        assert [h["score"] for h in got] == pytest.approx([h["score"] for h in want], abs=1e-4), (name, i)
    assert max(batch.requests for batch in batches) > 1  # requests did share engine calls


@pytest.mark.numerical
@pytest.mark.parametrize("engine", ENGINES)
def test_scores_false_gives_the_same_texts_with_the_searchs_scores(checkpoint: Path, engine: str) -> None:
    """``"scores": false`` answers the texts of the default request, each score the one ``translate`` gives with
    ``scores=False`` (on CTranslate2 the search's, without the scoring pass); the default stays exact; requests of
    either kind sent together never share an engine call."""
    import dotformer
    from dotformer.api.serve import TranslationServer

    texts = inputs()[:10]
    translator = dotformer.load(checkpoint, device="cpu", engine=engine)
    exact = translator.translate(texts, beam=4, max_len_b=8, details=True)
    searched = translator.translate(texts, beam=4, max_len_b=8, details=True, scores=False)
    batches: list[Any] = []
    with TranslationServer(translator, port=0, batch_wait_ms=50.0) as server:
        server.batcher.on_batch = batches.append
        bodies = [{"texts": [text], "beam": 4, "max_len_b": 8, "scores": k % 2 == 0} for k, text in enumerate(texts)]
        with ThreadPoolExecutor(len(bodies)) as pool:
            replies = list(pool.map(lambda body: post(server.url, body)["translations"][0], bodies, timeout=TIMEOUT_S))
    for k, reply in enumerate(replies):
        want = exact[k] if k % 2 == 0 else searched[k]
        assert reply["text"] == exact[k].text == searched[k].text
        assert reply["score"] == pytest.approx(want.score, abs=1e-4)  # as above: another batch around the same row
    assert sum(batch.sentences for batch in batches) == len(texts)
    assert len(batches) >= 2  # the two kinds were never in one call
