"""Python's http.server with injected faults, run as its own process by the tests:
  --cut-first N   the first GET of each file sends N body bytes, then drops the connection
  --die-after N   a GET of a file larger than N bytes sends N, then the server process dies
It prints its port on the first line of stdout."""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar


class FaultyHandler(SimpleHTTPRequestHandler):
    cut_first: ClassVar[int | None] = None
    die_after: ClassVar[int | None] = None
    _cut_done: ClassVar[set[str]] = set()  # paths whose first GET was cut
    _lock = threading.Lock()

    def copyfile(self, source, outputfile) -> None:
        if self.command != "GET" or self.path.endswith("/"):
            shutil.copyfileobj(source, outputfile)
            return
        if self.die_after is not None and os.fstat(source.fileno()).st_size > self.die_after:
            outputfile.write(source.read(self.die_after))
            outputfile.flush()
            os._exit(1)  # the store dies mid-transfer
        with self._lock:
            first = self.path not in self._cut_done
            self._cut_done.add(self.path)
        if first and self.cut_first is not None:
            outputfile.write(source.read(self.cut_first))
            outputfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        shutil.copyfileobj(source, outputfile)

    def log_message(self, *args) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--cut-first", type=int)
    parser.add_argument("--die-after", type=int)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    FaultyHandler.cut_first = args.cut_first
    FaultyHandler.die_after = args.die_after
    handler = functools.partial(FaultyHandler, directory=args.dir)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
