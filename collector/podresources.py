"""The kubelet's pod-resources API over its unix socket (the only collector module using gRPC).

One call is made: `v1.PodResourcesLister/List` (k8s.io/kubelet/pkg/apis/podresources/v1), whose answer is decoded by
`collector.kubelet_pods` (our own reading of the fields used; no generated code). The socket is the kubelet's
(`/var/lib/kubelet/pod-resources/kubelet.sock`, mounted read-only into the collector's pod): local, unauthenticated,
and limited by the kubelet to 100 calls/s for all of its clients together — one call per collector cycle is far
below that. Every failure — no socket, nobody listening, no answer within the timeout, an answer that is not the
message — is one `PodResourcesUnavailableError` naming the socket and what happened.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc

from collector.kubelet_pods import (
    DEFAULT_SOCKET,
    KubeletPod,
    PodResourcesDecodeError,
    PodResourcesUnavailableError,
    decode_list_response,
)

LIST_METHOD = "/v1.PodResourcesLister/List"
# The kubelet's own client allows answers up to 16 MiB (pkg/kubelet/apis/podresources/client.go): a node's pods with
# their CPU, memory and device lists fit many times over; gRPC's default of 4 MiB would cut busy nodes short.
MAX_ANSWER_BYTES = 16 * 1024 * 1024


def _empty_request(_: object) -> bytes:
    return b""  # ListPodResourcesRequest has no fields: its serialized form is empty


def _raw_answer(data: bytes) -> bytes:
    return data


class PodResourcesClient:
    """`list()` asks the kubelet at `socket_path` for its pods, waiting at most `timeout_seconds`."""

    def __init__(self, socket_path: Path = DEFAULT_SOCKET, *, timeout_seconds: float = 5.0) -> None:
        if not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds: expected > 0, got {timeout_seconds}")
        self.socket_path = socket_path
        self.timeout_seconds = timeout_seconds
        self._channel: grpc.Channel | None = None

    def _list_call(self) -> grpc.UnaryUnaryMultiCallable:
        if self._channel is None:
            # the channel reconnects by itself when the kubelet restarts and recreates its socket
            self._channel = grpc.insecure_channel(
                f"unix:{self.socket_path.absolute()}",
                options=[("grpc.max_receive_message_length", MAX_ANSWER_BYTES)],
            )
        return self._channel.unary_unary(
            LIST_METHOD, request_serializer=_empty_request, response_deserializer=_raw_answer
        )

    def list(self) -> tuple[KubeletPod, ...]:
        """The kubelet's active pods with their devices; raises PodResourcesUnavailableError."""
        where = f"kubelet pod-resources socket {self.socket_path}"
        if not self.socket_path.exists():
            raise PodResourcesUnavailableError(f"no {where}")
        started = time.monotonic()
        try:
            answer = self._list_call()(None, timeout=self.timeout_seconds)
        except grpc.RpcError as e:
            code = e.code() if isinstance(e, grpc.Call) else None
            # A gRPC-Go server (the kubelet) resets a call whose deadline passed (RST_STREAM CANCEL), which may reach
            # us before our own deadline fires; this client never cancels a call itself.
            late = code == grpc.StatusCode.CANCELLED and time.monotonic() - started >= self.timeout_seconds / 2
            if code == grpc.StatusCode.DEADLINE_EXCEEDED or late:
                why = f"no answer within {self.timeout_seconds:g} s"
            else:
                details = e.details() if isinstance(e, grpc.Call) else ""
                why = f"{code.name if code is not None else 'error'}: {details}".rstrip(": ")
            raise PodResourcesUnavailableError(f"{where}: {why}") from e
        try:
            return decode_list_response(answer)
        except PodResourcesDecodeError as e:
            raise PodResourcesUnavailableError(f"{where}: the answer is not a pod list ({e})") from e

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
