"""Models the documentation's examples use: the reader's own project (orders, articles), which
tests/docs/runner.py offers to the examples as ``shop.models`` and ``blog.models``."""
