"""A device reached by a command (docs/devices.md): the timing worker over a plain subprocess and over SSH, what it
refuses (garbage, oversized requests, another version, a missing runtime or provider), and the faults it survives
(a worker killed mid-profile, a hung connection, a worker lost for good, then resumed from the journal)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import write_uniform_configs

import aows_worker
from aows_core import artifacts as io
from aows_core.config import ProfilingSettings
from aows_core.devices import get_device
from aows_core.devices.remote import WorkerLost, WorkerRefused
from aows_core.space import get_space
from aows_core.stages.profile import ProfileJob, profile_session
from aows_core.training.loop import RunControl

ROOT = Path(__file__).resolve().parents[2]
FMNIST = get_space("mobilenet_v1_fmnist")
HERE = f"env PYTHONPATH={ROOT}"  # the worker as a plain subprocess of this machine
WORKER = f"{sys.executable} -m aows_worker"
RUNTIMES = ["onnxruntime", "openvino"]


def remote(backend, worker=WORKER, prefix=HERE, **kw):
    return {"backend": backend, "remote": prefix, "worker": worker, **kw}


@pytest.mark.parametrize("backend", RUNTIMES)
def test_a_remote_runtime_is_the_local_one_on_the_device_and_times_networks(backend):
    """Over the channel: the same fingerprint as in-process plus where it was timed, real timings (the widest
    network slower than the narrowest), a paired measurement, and the worker gone once the device closes."""
    local = get_device({"backend": backend}, FMNIST, 0)
    dev = get_device(remote(backend), FMNIST, 0)
    try:
        fl, fr = local.fingerprint(), dev.fingerprint()
        assert {k: v for k, v in fr.items() if k not in ("remote", "python", "numpy")} == fl
        assert fr["remote"] == HERE and fr["numpy"] == np.__version__
        wide = dev.measure(FMNIST.max_config, 10, 2).samples
        narrow = dev.measure(FMNIST.min_config, 10, 2).samples
        assert wide.shape == narrow.shape == (10,) and (narrow > 0).all()
        assert np.min(wide) > 3 * np.min(narrow)
        paired = dev.measure_paired(FMNIST.min_config, FMNIST.max_config, 10, 1, chunks=5, reference_share=0.4)
        assert [len(a) for a in paired.network] == [2] * 5 and [len(a) for a in paired.reference] == [1] * 5
        assert paired.timed_s == pytest.approx(sum(a.sum() for a in paired.network + paired.reference) / 1e3)
        proc = dev.backend.channel.proc
    finally:
        dev.close()
    assert proc.poll() == 0


def test_bad_or_oversized_requests_are_refused_and_the_worker_goes_on():
    proc = subprocess.Popen([sys.executable, "-m", "aows_worker", "--max-message", "4096"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ask(raw: bytes) -> dict:
        proc.stdin.write(raw + b"\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    try:
        assert ask(b"\x00\xffgarbage{")["kind"] == "garbage"
        assert ask(b"[1, 2]")["kind"] == "garbage"
        big = ask(json.dumps({"op": "load", "model": "A" * 100_000}).encode())
        assert big["kind"] == "oversized" and "4096" in big["error"]
        assert ask(b'{"op": "time", "net": 1}')["error"] == "request 'time' before hello"
        hello = ask(json.dumps({"op": "hello", "version": aows_worker.VERSION, "runtime": "onnxruntime"}).encode())
        assert hello["ok"] and hello["fingerprint"]["onnxruntime"]
        assert ask(b'{"op": "time", "net": 7}')["error"] == "no network 7 is loaded"
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0  # alive to the end, then gone at end of input


def test_the_workers_version_is_the_packages():
    from importlib.metadata import version

    assert aows_worker.VERSION.split("/")[0] == version("aows")


def test_a_worker_of_another_version_is_refused_naming_both():
    old = f"{sys.executable} -c \"import aows_worker as w; w.VERSION = '0.2.0/0'; w.main()\""
    with pytest.raises(WorkerRefused) as e:
        get_device(remote("onnxruntime", worker=old), FMNIST, 0)
    assert "'0.2.0/0'" in str(e.value) and repr(aows_worker.VERSION) in str(e.value)
    assert "cat > aows_worker.py < aows_worker.py" in str(e.value)


@pytest.mark.parametrize("backend", RUNTIMES)
def test_a_runtime_missing_on_the_device_is_refused_naming_the_install_command(backend, tmp_path):
    (tmp_path / f"{backend}.py").write_text("raise ImportError('No module named %r' % __name__)\n")
    with pytest.raises(WorkerRefused) as e:
        get_device(remote(backend, prefix=f"env PYTHONPATH={tmp_path}:{ROOT}"), FMNIST, 0)
    assert e.value.kind == "runtime" and f"python3 -m pip install --user {backend}" in str(e.value)


def test_a_remote_command_that_is_not_a_command_line_is_refused_naming_it():
    with pytest.raises(ValueError, match="are not a command line .*No closing quotation"):
        get_device(remote("onnxruntime", prefix="ssh 'pi@jetson"), FMNIST, 0)


def test_a_backend_without_a_worker_runtime_refuses_remote():
    with pytest.raises(ValueError, match="cannot time on another machine.*onnxruntime"):
        get_device({"backend": "torch-cpu", "remote": "ssh pi@jetson"}, FMNIST, 0)


def test_a_network_that_does_not_answer_is_a_timeout_naming_it_not_a_hang():
    dev = get_device(remote("onnxruntime", timeout_s=2), FMNIST, 0)
    proc = dev.backend.channel.proc
    os.kill(proc.pid, signal.SIGSTOP)  # the connection hangs: the worker neither reads nor answers
    t0 = time.monotonic()
    try:
        with pytest.raises(TimeoutError) as e:
            dev.measure(FMNIST.max_config, 5, 1)
    finally:
        dev.close()
    assert time.monotonic() - t0 < 10
    assert f"network {list(FMNIST.max_config)}" in str(e.value) and "2 s" in str(e.value)
    assert proc.poll() is not None  # stopped, not left behind


def _profile(space, tmp_path, spec, resume="resume"):
    job = ProfileJob(space, "edge", spec, ProfilingSettings(repeats=5, retest=5, checkpoint_every=1), seed=1)
    return profile_session(job, tmp_path / "c.parquet", tmp_path / "edge.parquet", RunControl(tmp_path / resume, False))


def _flaky(log, first, then, deaths):
    return remote("onnxruntime", worker=f"{sys.executable} {ROOT}/tests/devices/flaky_worker.py {log} {first} {then} "
                                        f"{deaths}")


def test_a_worker_killed_mid_profile_is_started_again_and_no_finished_network_is_timed_again(tiny_space, tmp_path):
    write_uniform_configs(tiny_space, tmp_path / "c.parquet", (12, 4, 8))
    log = tmp_path / "worker.log"
    with pytest.warns(UserWarning, match="starting the worker again"):
        res = _profile(tiny_space, tmp_path, _flaky(log, 3, 8, 3))
    table, meta = io.read_table(tmp_path / "edge.parquet", "latency")
    assert table.column("role").to_pylist().count("sample") == 24
    events = log.read_text().split()
    # each job (re-timings included) loads its network and the reference once; only the three cut short load again
    assert events.count("died") == 3 and events.count("load") == 2 * (res["total"] + 3)
    assert meta["fingerprint"]["remote"] == HERE


def test_a_worker_lost_for_good_stops_the_stage_and_a_rerun_resumes_from_the_journal(tiny_space, tmp_path):
    write_uniform_configs(tiny_space, tmp_path / "c.parquet", (12, 4, 8))
    log = tmp_path / "worker.log"
    with pytest.raises(WorkerLost, match="resumes from its journal"), pytest.warns(UserWarning):
        _profile(tiny_space, tmp_path, _flaky(log, 4, 1, 1000))  # once dead, each new worker dies at once
    journal = tmp_path / "resume" / "profile_edge.jsonl"
    done = len(journal.read_text().splitlines()) - 1  # the header, then one line per finished job
    assert done >= 1 and not (tmp_path / "edge.parquet").exists()
    log2 = tmp_path / "worker2.log"
    res = _profile(tiny_space, tmp_path, _flaky(log2, 1, 1, 0))  # a healthy worker
    table, _ = io.read_table(tmp_path / "edge.parquet", "latency")
    assert table.column("role").to_pylist().count("sample") == 24
    assert log2.read_text().split().count("load") == 2 * (res["total"] - done)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ssh_localhost(tmp_path):
    """`ssh` to an SSH server of this test's own on localhost (openssh-server: .ci/run installs it); its prefix."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not (os.path.exists(sshd) and shutil.which("ssh") and shutil.which("ssh-keygen")):
        pytest.skip("openssh-server and openssh-client are not installed (.ci/run installs them)")
    try:
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory (a fresh machine lacks it)
    except OSError:
        pytest.skip("sshd needs /run/sshd, which this user cannot create")
    d = tmp_path / "ssh"
    d.mkdir(mode=0o700)
    for key in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    shutil.copy(d / "user.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\n"
                                   f"AuthorizedKeysFile {d / 'authorized_keys'}\nPidFile {d / 'sshd.pid'}\n"
                                   "PasswordAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n"
                                   "StrictModes no\n")
    server = subprocess.Popen([sshd, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.DEVNULL)
    prefix = (f"ssh -p {port} -i {d / 'user'} -o BatchMode=yes -o StrictHostKeyChecking=no "
              f"-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR 127.0.0.1")
    deadline = time.time() + 20
    while subprocess.run([*prefix.split(), "true"], capture_output=True).returncode != 0:
        if time.time() > deadline or server.poll() is not None:
            server.kill()
            pytest.fail("the test's SSH server on localhost did not accept a login")
        time.sleep(0.2)
    yield prefix
    server.kill()
    server.wait()


def test_a_device_over_ssh_times_and_reports_the_devices_fingerprint(ssh_localhost):
    dev = get_device(remote("onnxruntime", prefix=ssh_localhost, worker=f"env PYTHONPATH={ROOT} {WORKER}"), FMNIST, 0)
    try:
        fp = dev.fingerprint()
        assert fp["remote"] == ssh_localhost and fp["onnxruntime"]
        m = dev.measure_paired(FMNIST.min_config, FMNIST.max_config, 10, 1, chunks=5, reference_share=0.4)
        assert np.min(np.concatenate(m.reference)) > 3 * np.min(np.concatenate(m.network))
    finally:
        dev.close()
