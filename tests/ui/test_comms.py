"""Messages from the browser reach Panel on the kernel's main thread, also when JupyterLab sends them to a subshell.

A real ipykernel (this interpreter) and a client that speaks as JupyterLab does with ``commsOverSubshells``: it
opens pyviz_comms client comms (Panel's channel for clicks and edits) and sends their messages with a subshell's id.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from ipykernel.kernelspec import install
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

from tests.waiting import deadline

pytestmark = pytest.mark.slow

SETUP = """
import threading
from pyviz_comms import JupyterCommJS
threads = {"before": [], "after": []}
def recorder(name):
    return lambda msg: threads[name].append(threading.current_thread().name)
"""


@pytest.fixture
def kernel(tmp_path):
    install(prefix=str(tmp_path), kernel_name="lab-test")  # this interpreter
    km = KernelManager(kernel_name="lab-test",
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "share/jupyter/kernels")]))
    km.start_kernel(env={"PYDEVD_DISABLE_FILE_VALIDATION": "1"})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run(kc, code: str) -> str:
    """Execute ``code`` on the main shell; returns what it printed to stdout (fails on an error, with its stderr)."""
    out: dict[str, list[str]] = {"stdout": [], "stderr": []}

    def hook(msg):
        if msg["msg_type"] == "stream":
            out[msg["content"]["name"]].append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out["stderr"].append("\n".join(msg["content"]["traceback"]))

    reply = kc.execute_interactive(code, timeout=120, output_hook=hook)
    assert reply["content"]["status"] == "ok", "".join(out["stderr"])
    return "".join(out["stdout"])


def send(kc, msg_type: str, content: dict, subshell: str | None = None) -> None:
    msg = kc.session.msg(msg_type, content)
    if subshell is not None:
        msg["header"]["subshell_id"] = subshell
    kc.shell_channel.send(msg)


def open_client_comm(kc, name: str) -> str:
    """Make a pyviz_comms client comm in the kernel and open it from the client; returns its comm id."""
    target = uuid.uuid4().hex
    run(kc, f"{name} = JupyterCommJS(id={target!r}, on_msg=recorder({name!r}))")
    comm_id = uuid.uuid4().hex
    send(kc, "comm_open", {"comm_id": comm_id, "target_name": target, "data": {}})
    # the main shell handles its messages in order, so this runs once the open is handled: a message sent to the
    # subshell before that would find no comm and be dropped
    run(kc, f"assert {name}._comm is not None")
    return comm_id


def test_comm_messages_sent_to_a_subshell_are_handled_on_the_main_thread(kernel):
    kc = kernel
    features = kc.kernel_info(reply=True)["content"].get("supported_features", [])
    if "kernel subshells" not in features:
        pytest.skip("this ipykernel has no subshells: every message is handled on the main thread anyway")
    kc.control_channel.send(kc.session.msg("create_subshell_request", {}))
    subshell = kc.get_control_msg(timeout=30)["content"]["subshell_id"]

    run(kc, SETUP)
    before = open_client_comm(kc, "before")  # opened before the lab's extension: the kernel's own routing
    run(kc, "import lab.ui as ui\nui.extension()")
    after = open_client_comm(kc, "after")
    for _ in range(3):
        for comm_id in (before, after):
            send(kc, "comm_msg", {"comm_id": comm_id, "data": {"event": "click"}}, subshell=subshell)
    end = deadline(60)  # the subshell handles its messages at its own pace, beside the main shell
    while True:
        threads = json.loads(run(kc, "import json\nprint(json.dumps(threads))").strip().splitlines()[-1])
        if sum(map(len, threads.values())) == 6 or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert all(name.startswith("subshell") for name in threads["before"]), \
        f"the client's messages did not reach a subshell, so this test shows nothing: {threads}"
    assert threads["after"] == ["MainThread"] * 3, threads
