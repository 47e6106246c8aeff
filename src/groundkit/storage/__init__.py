"""Everything groundkit persists: metadata stores, the vector store, URL snapshots.

``location.StoreLocation`` resolves where a collection lives and opens its stores
as one bundle; ``binding`` ties a collection to its analyzer and embedder;
``protocols`` holds the seams every backend implements.
"""
