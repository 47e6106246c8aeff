"""The lexical side: the analyzer that turns text into terms, and BM25 over those terms.

Pure computation over arrays; storage backends live in ``groundkit.storage``.
"""
