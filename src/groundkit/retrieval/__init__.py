"""Searching a collection and proving where each result came from."""
