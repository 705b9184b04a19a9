"""Moved to `deepdive.book.evidence`, which the intro and chapter 7 share; this name stays
while the ledger's tests still import the evidence groups from here."""

from deepdive.book.evidence import EVIDENCE, FromClaim, ShardedMemory

__all__ = ["EVIDENCE", "FromClaim", "ShardedMemory"]
