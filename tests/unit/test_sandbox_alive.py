"""A SIGKILLed process counts as gone only once its ports are free.

``process.alive`` decides when ``Sandbox.restart(kill=True)`` starts a component again on
the same port. The leader of a thread group turns zombie before its other threads are torn
down, and until they are its sockets stay open: a kube-apiserver restarted at that moment
failed with "bind: address already in use" (the dashboard test's first try). Here a real
process with threads holds a listening port; after each SIGKILL, once ``alive`` says no,
the port must bind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from gatekeeper_lab.sandbox.process import alive, free_ports

CHILD = r"""
import socket, sys, threading, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
for _ in range(16):
    threading.Thread(target=time.sleep, args=(100,), daemon=True).start()
print("ready", flush=True)
time.sleep(100)
"""


def _binds(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_a_killed_process_is_alive_until_its_port_is_free() -> None:
    for _ in range(10):  # the window is short: before the fix, about 6 tries in 10 fell into it
        port = free_ports(1)[0]
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(port)], stdout=subprocess.PIPE, start_new_session=True
        )
        try:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
            assert alive(child.pid) and not _binds(port)
            os.killpg(child.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while alive(child.pid) and time.monotonic() < deadline:
                time.sleep(0.0005)
            assert not alive(child.pid), "still alive 10 s after SIGKILL"
            assert _binds(port), "alive() said gone while the process still held its port"
        finally:
            child.kill()
            child.wait()
