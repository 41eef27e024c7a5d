"""Code the tests (and the benchmarks) share: the mount harness, the reference oracle, mount
watching, plan builders, store and corpus helpers, and the in-process FUSE operations.

Test files import from here and never from each other."""
