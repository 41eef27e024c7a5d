"""Scheduling view materialization (SAND §5.4): a pure priority policy and its executor."""
