"""PID → pod attribution from cgroup files in every format the kubelet and container runtimes produce."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.podmap import (
    CGROUP_READ_LIMIT_BYTES,
    CgroupIdentity,
    CgroupOversizedError,
    CgroupUnreadableError,
    ProcCgroupResolver,
    ProcessGoneError,
    parse_cgroup,
    read_identity,
)
from tests.collector.conftest import write_proc

UID = "6e0b2d3c-1234-4abc-8def-0123456789ab"
UID_SYSTEMD = UID.replace("-", "_")
CID = "3f4e5d6c" * 8

CASES = {
    "v1 cgroupfs burstable": (
        f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{CID}"
    ),
    "v1 cgroupfs besteffort": f"4:cpu,cpuacct:/kubepods/besteffort/pod{UID}/{CID}",
    "v1 cgroupfs guaranteed": f"9:pids:/kubepods/pod{UID}/{CID}",
    "v1 systemd containerd burstable": (
        "11:devices:/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope"
    ),
    "v1 systemd docker besteffort": (
        "3:memory:/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{UID_SYSTEMD}.slice/docker-{CID}.scope"
    ),
    "v2 systemd crio guaranteed": f"0::/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/crio-{CID}.scope",
    "v2 systemd containerd burstable": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope"
    ),
    "v2 cgroupfs": f"0::/kubepods/burstable/pod{UID}/{CID}",
    "v2 kind nested under kubelet.slice": (
        "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope"
    ),
    "v2 cgroup namespace systemd": f"0::/../../kubepods-besteffort-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope",
    "v2 cgroup namespace cgroupfs": f"0::/../../pod{UID}/{CID}",
    "hybrid v1+v2 lines": (
        "13:misc:/\n12:rdma:/\n"
        f"11:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/crio-{CID}.scope\n"
        "0::/"
    ),
}


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_every_cgroup_format_yields_pod_uid_and_container(text: str) -> None:
    assert parse_cgroup(text) == CgroupIdentity(pod_uid=UID, container_id=CID)


def test_pod_level_cgroup_without_container_still_names_the_pod() -> None:
    text = f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice"
    assert parse_cgroup(text) == CgroupIdentity(pod_uid=UID, container_id=None)


def test_static_pod_uid_without_dashes() -> None:
    static_uid = "5a4f1d2e9c8b7a6f5e4d3c2b1a0f9e8d"
    assert parse_cgroup(f"0::/kubepods/burstable/pod{static_uid}/{CID}") == CgroupIdentity(static_uid, CID)


@pytest.mark.parametrize(
    "text",
    [
        "0::/init.scope",
        "0::/user.slice/user-1000.slice/session-3.scope",
        "0::/system.slice/docker-" + CID + ".scope",
        "12:memory:/\n0::/",
        "",
        "garbage without colons",
    ],
)
def test_host_processes_have_no_pod(text: str) -> None:
    assert parse_cgroup(text) is None


@settings(deadline=None)  # a loaded 2-core CI machine must not fail on wall time
@given(st.text())
def test_parser_never_raises_on_arbitrary_text(text: str) -> None:
    result = parse_cgroup(text)
    assert result is None or isinstance(result, CgroupIdentity)


@settings(deadline=None)
@given(st.lists(st.sampled_from(["kubepods", "pod", UID, UID_SYSTEMD, CID, ".slice", ".scope", "-", "/", ":", "\n"])))
def test_parser_never_raises_on_cgroup_like_fragments(parts: list[str]) -> None:
    result = parse_cgroup("".join(parts))
    assert result is None or result.pod_uid


def test_reads_fixture_proc_tree_and_reports_vanished_pids(tmp_path: Path) -> None:
    root = write_proc(tmp_path, {42: CASES["v2 systemd crio guaranteed"], 7: "0::/init.scope\n"})
    resolver = ProcCgroupResolver(root)
    assert resolver.resolve(42) == CgroupIdentity(UID, CID)
    assert resolver.resolve(7) is None
    with pytest.raises(ProcessGoneError, match="99"):
        read_identity(root, 99)


def test_unreadable_cgroup_file_is_an_error_not_a_host_process(tmp_path: Path) -> None:
    (tmp_path / "42" / "cgroup").mkdir(parents=True)  # exists, cannot be read as a file (even by root)
    with pytest.raises(CgroupUnreadableError, match="cannot read"):
        read_identity(tmp_path, 42)


def test_oversized_cgroup_file_is_read_only_up_to_the_limit(tmp_path: Path) -> None:
    filler = "".join(f"{i}:name=x{i}:/system.slice/filler-{i:06d}.service\n" for i in range(2000))
    assert len(filler) > CGROUP_READ_LIMIT_BYTES
    pod_line = f"0::/kubepods/besteffort/pod{UID}/{CID}\n"
    root = write_proc(tmp_path, {1: pod_line + filler, 2: filler + pod_line, 3: pod_line[:CGROUP_READ_LIMIT_BYTES]})
    with pytest.raises(CgroupOversizedError) as first:
        read_identity(root, 1)
    assert first.value.identity == CgroupIdentity(UID, CID)  # named in the lines that were read
    with pytest.raises(CgroupUnreadableError, match=f"over {CGROUP_READ_LIMIT_BYTES} bytes") as last:
        read_identity(root, 2)
    assert not isinstance(last.value, CgroupOversizedError)  # the pod line lies beyond the limit: unknown
    assert read_identity(root, 3) == CgroupIdentity(UID, CID)  # under the limit: read whole
