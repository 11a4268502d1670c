"""The tui-chat benchmark (``make bench``): "the UI never blocks, the engine never waits".

Run it with ``python -m bench``; see :mod:`bench.__main__`. Not part of the product:
the naive streaming pattern it compares against lives in :mod:`bench.naive`.
"""
