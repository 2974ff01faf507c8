"""The collections box: persistent Deque and Index, each on a Cache of its own.

``deque`` (Deque), ``index`` (Index and its views), ``collection`` (what they share: opening their
cache, writing in bounded batches) and ``persistent`` (the import path of both).
"""
