"""The HTTP floor of the advisor's benches: what the same framework costs answering the same bytes.

FastAPI under uvicorn with the advisor's own server flags (`advisor.cli.serve`: no access log, its keep-alive), one
`async` POST route per path, each reading the request body and answering the bytes the advisor answered there
(pre-encoded, read from a file at start). What the advisor's handler adds over this floor is its own work: parsing,
scoring, encoding. Run by `bench/http_wrk.py`:

    python bench/http_floor.py PORT '{"/v1/score": "answer.json", ...}'
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request, Response

from collector.push import ADVISOR_KEEP_ALIVE_SECONDS


def floor_app(answers: dict[str, bytes]) -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    def route(data: bytes) -> Callable[[Request], Awaitable[Response]]:
        async def answer(request: Request) -> Response:
            await request.body()
            return Response(data, media_type="application/json")

        return answer

    for path, data in answers.items():
        app.add_api_route(path, route(data), methods=["POST"])
    return app


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit('error: usage: http_floor.py PORT \'{"/path": "answer file", ...}\'')
    answers = {path: Path(file).read_bytes() for path, file in json.loads(sys.argv[2]).items()}
    uvicorn.run(
        floor_app(answers),
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_level="warning",
        log_config=None,
        access_log=False,
        timeout_keep_alive=ADVISOR_KEEP_ALIVE_SECONDS,
    )


if __name__ == "__main__":
    main()
