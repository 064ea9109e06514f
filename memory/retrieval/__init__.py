"""Archive retrieval: what was said in earlier conversations, found by words and by meaning.

``text`` (what a term is), ``embeddings`` (the vector seam and the embedded offline model),
``index`` (one scope's messages: BM25, vectors, fusion, reading around a message) and
``service`` (``Retrieval``: indexes kept in step with an archive store, per scope).
"""
