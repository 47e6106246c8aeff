"""The parts of ``python -m evals.bench_hybrid``, one job per module.

- ``common``: settings the parts share, the progress log, opening a Retriever
- ``embedders``: ``HashEmbedder`` and the two embedders derived for timing
- ``ingest``, ``ingest_profile``, ``ingest_page``: part 1, dense ingest against the
  bare-encode floor (measurement, cProfile of the ingest, page section)
- ``prepare``: generating, ingesting and caching the synthetic collections
- ``latency``, ``native``, ``sweep``, ``latency_page``: part 2, query latency by
  stage, the LanceDB-native anchor, the vector-index sweep, page section
- ``memory``: peak RSS of each system in a process of its own
- ``scale``: query p50 against corpus size, a table and a plot

Other scripts reuse ``embedders.HashEmbedder`` and the collections ``prepare``
caches under ``evals/out/bench_hybrid/``.
"""
