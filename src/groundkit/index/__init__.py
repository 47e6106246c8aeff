"""Persistence and in-memory indexes: metadata store, analyzer, BM25."""
