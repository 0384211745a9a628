"""The advisor below its ASGI app: the only code that reaches into uvicorn's HTTP protocol and server.

What lives here cannot be said in ASGI, because it happens before a request exists or after its answer was sent:
deadlines and a size cap on the request head and a cap on open connections (`guard`), handing a collector's
keep-alive connection to an ingest worker process once its push is answered (`steering`), and that worker serving
the connection with uvicorn's protocol without a uvicorn server (`worker`). Each subclasses or instantiates
`uvicorn.protocols.http.httptools_impl.HttpToolsProtocol` and relies on attributes uvicorn does not promise (the
parser callbacks, `cycle`, `connections`, `ServerState`), so:

* import-linter lets no other module of ours import uvicorn but the CLI's server start-up (`.importlinter`);
* pyproject.toml bounds uvicorn above at the last release these were checked against, and
  tests/advisor/test_transport_fence.py fails first when a newer uvicorn drops what they use.
"""
