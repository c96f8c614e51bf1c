"""Codecs named by dotted path in the tests' OUTBOX["CODEC"]."""


class Wrapped:
    """Stores every payload as {"wrapped": payload}: visible in the row, invisible to handlers."""

    def encode(self, value):
        return {"wrapped": value}

    def decode(self, data):
        return data["wrapped"]


NOT_A_CODEC = object()
