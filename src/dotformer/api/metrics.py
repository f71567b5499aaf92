"""What ``GET /metrics`` of ``dotformer serve`` answers: the server's figures in Prometheus' text format, through
``prometheus-client``, and one JSON line per request in the access log.

Each server has its own registry (never prometheus-client's global one), so two servers in one process keep their
own counts. The figures (``dotformer_`` prefixed):

    requests_total{route, status}           requests answered (route "other" for a path that is not one)
    request_seconds{route}                  time from the request read to its answer (histogram)
    batch_sentences, batch_tokens,          what each engine call of the batcher held: sentences, source tokens x
    batch_requests                          beam, requests (histograms)
    queue_sentences                         sentences waiting for an engine call now (gauge)
    engine_seconds_total                    seconds the engine spent on the batcher's calls (``rate(...[1m])`` is
                                            the engine's busy share: near 1, more requests only wait longer)
    generated_tokens_total{route}           output tokens produced (``rate(...[1m])`` is tokens/s)

A scraper reads them with ``curl http://127.0.0.1:8080/metrics`` (with ``Authorization: Bearer KEY`` when the
server has a key).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from dotformer.errors import require_extra

if TYPE_CHECKING:
    from dotformer.api.batcher import BatchStats

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
COUNT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # sentences, requests per engine call
TOKEN_BUCKETS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)  # source tokens x beam per engine call


class ServerMetrics:
    """The figures of the module docstring, in a registry of their own.

    Args:
        queue: returns the sentences waiting for an engine call now (read at each scrape).

    Raises:
        MissingExtraError: prometheus-client is not installed (``pip install "dotformer[serve]"``).
    """

    def __init__(self, queue: Callable[[], int]) -> None:
        prometheus = require_extra("serve", "prometheus_client", "GET /metrics")
        self._prometheus = prometheus
        self.registry = registry = prometheus.CollectorRegistry(auto_describe=True)
        self.requests = prometheus.Counter(
            "dotformer_requests", "Requests answered, by route and HTTP status.", ["route", "status"], registry=registry
        )
        self.latency = prometheus.Histogram(
            "dotformer_request_seconds", "Seconds from a request read to its answer, by route.", ["route"],
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.batch_sentences = prometheus.Histogram(
            "dotformer_batch_sentences", "Sentences in one engine call.", buckets=COUNT_BUCKETS, registry=registry
        )
        self.batch_tokens = prometheus.Histogram(
            "dotformer_batch_tokens", "Source tokens x beam in one engine call.", buckets=TOKEN_BUCKETS,
            registry=registry,
        )  # fmt: skip
        self.batch_requests = prometheus.Histogram(
            "dotformer_batch_requests", "Requests sharing one engine call.", buckets=COUNT_BUCKETS, registry=registry
        )
        self.queue = prometheus.Gauge(
            "dotformer_queue_sentences", "Sentences waiting for an engine call.", registry=registry
        )
        self.queue.set_function(queue)
        self.engine_seconds = prometheus.Counter(
            "dotformer_engine_seconds", "Seconds the engine spent on the batcher's calls.", registry=registry
        )
        self.generated = prometheus.Counter(
            "dotformer_generated_tokens", "Output tokens produced, by route.", ["route"], registry=registry
        )

    def answered(self, route: str, status: int, seconds: float) -> None:
        """Count one answered request (``route``: ``"POST /api/translate"``, or ``"other"``)."""
        self.requests.labels(route=route, status=str(status)).inc()
        self.latency.labels(route=route).observe(seconds)

    def batch(self, stats: BatchStats) -> None:
        """Record one engine call of the batcher (its ``on_batch``)."""
        self.batch_sentences.observe(stats.sentences)
        self.batch_tokens.observe(stats.tokens)
        self.batch_requests.observe(stats.requests)
        self.engine_seconds.inc(stats.seconds)

    def tokens(self, route: str, count: int) -> None:
        """Count ``count`` output tokens produced for ``route`` (safe from the model's thread)."""
        if count:
            self.generated.labels(route=route).inc(count)

    def render(self) -> tuple[bytes, str]:
        """The text a scrape gets, and its content type (Prometheus' text format, prometheus-client's latest)."""
        return self._prometheus.generate_latest(self.registry), self._prometheus.CONTENT_TYPE_LATEST


def access_line(logger: logging.Logger, route: str, status: int, seconds: float, sentences: int) -> None:
    """Log one request as one JSON line at INFO: ``{"route": "POST /api/translate", "status": 200, "ms": 12.3,
    "sentences": 4}`` (``sentences``: texts answered; 0 for an error)."""
    if logger.isEnabledFor(logging.INFO):
        line = {"route": route, "status": status, "ms": round(seconds * 1000, 3), "sentences": sentences}
        logger.info(json.dumps(line))
