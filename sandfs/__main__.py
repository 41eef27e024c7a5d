"""`sandfs` (the console script) and `python -m sandfs`."""

from sandfs.runtime import single_threaded_blas

single_threaded_blas()  # before anything imports numpy

from sandfs.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
