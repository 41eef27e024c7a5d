"""sandfs: a FUSE view filesystem that serves ready-made video training batches (SAND, SOSP'25)."""

__version__ = "0.1.0"
