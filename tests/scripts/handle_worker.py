"""A worker process holding one long-lived adapter handle on an evstore session, driven line by line.

Run by the two-process tests (tests/test_openai_agents.py, tests/test_strands.py)::

    python tests/scripts/handle_worker.py --framework openai|strands|strands-snapshot --store DIR --session S --label A

(``strands-snapshot``: a Strands agent whose session manager is ``snapshot_session_manager``,
Strands' ``SnapshotSessionManager`` over ``EvstoreStorage``.)

It reads one JSON command per line on stdin and answers each with one JSON line on stdout:

* ``{"op": "turn", "prompt": P}``: one agent turn on the handle (a scripted model that calls
  one tool, no network); answers ``{"ok": true, "model_input": [...]}`` (what the model got
  first) or ``{"ok": false, "error": NAME, "message": ...}``.
* ``{"op": "turn", "prompt": P, "pause": true}`` (OpenAI only): the same, except that once the
  turn has read the session (``get_items``) and before it adds anything, the worker answers
  ``{"paused": true}`` and waits for a ``{"op": "go"}`` line: the test lets the other worker
  write meanwhile, so this turn loses the race deterministically.

The handle lives as long as the process: the point is that it recovers without being rebuilt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_API_KEY", "sk-dummy-no-network")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

REPO = Path(__file__).resolve().parent.parent.parent


class Worker:
    """The test's side: one worker process, each command answered within ``timeout`` seconds
    (a bound against a hang, never a measurement: a missing answer fails the test)."""

    def __init__(self, framework: str, store_dir: Path, session_id: str, label: str, timeout: float = 120) -> None:
        import queue
        import subprocess
        import threading

        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.timeout = timeout
        args = ["--framework", framework, "--store", str(store_dir), "--session", session_id, "--label", label]
        self.process = subprocess.Popen(
            [sys.executable, __file__, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put("")  # the process ended

    def answer(self) -> dict[str, Any]:
        import queue

        try:
            line = self.lines.get(timeout=self.timeout)
        except queue.Empty:
            self.close()
            raise AssertionError(f"no answer from the worker within {self.timeout} s") from None
        if not line:
            assert self.process.stderr is not None
            raise AssertionError(f"the worker ended: {self.process.stderr.read()[-3000:]}")
        value: dict[str, Any] = json.loads(line)
        return value

    def send(self, **cmd: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(cmd) + "\n")
        self.process.stdin.flush()
        return self.answer()

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=self.timeout)
        except Exception:
            self.process.kill()
            self.process.wait()


def reply(value: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(value, default=str) + "\n")
    sys.stdout.flush()


def command() -> dict[str, Any]:
    line = sys.stdin.readline()
    if not line:
        raise SystemExit(0)  # the test closed our stdin: it is done
    value: dict[str, Any] = json.loads(line)
    return value


def openai_worker(store: Any, session_id: str, label: str) -> None:
    from agents import RunConfig, Runner

    from evstore.integrations.openai_agents import EvstoreSession
    from tests.scripts.openai_run import ScriptedModel, make_agent

    session = EvstoreSession(session_id, store)  # one handle for every turn
    turns = 0
    while True:
        cmd = command()
        turns += 1
        model = ScriptedModel(f"{label}{turns}-")  # item ids unique per turn (the SDK merges equal ids)
        config = None
        if cmd.get("pause"):

            def pause(history: list[Any], new: list[Any]) -> list[Any]:
                reply({"paused": True})
                assert command()["op"] == "go"
                return history + new

            config = RunConfig(session_input_callback=pause)
        try:
            asyncio.run(Runner.run(make_agent(model), cmd["prompt"], session=session, run_config=config))
        except Exception as error:  # the test checks which
            reply({"ok": False, "error": type(error).__name__, "message": str(error)})
            continue
        reply({"ok": True, "model_input": model.inputs[0]})


def strands_worker(store: Any, session_id: str, label: str, snapshots: bool = False) -> None:
    from strands import Agent

    from evstore.integrations.strands import session_manager
    from evstore.integrations.strands_storage import snapshot_session_manager
    from tests.scripts.strands_model import ScriptedModel, get_weather

    model = ScriptedModel(label)
    agent = Agent(  # one agent (and session manager) for every turn: a long-lived worker's
        model=model,
        tools=[get_weather],
        session_manager=(snapshot_session_manager if snapshots else session_manager)(session_id, store),
        agent_id="main",
        callback_handler=None,
    )
    reply({"ready": True, "messages": len(agent.messages)})
    while True:
        cmd = command()
        calls = len(model.seen)
        try:
            agent(cmd["prompt"])
        except Exception as error:  # the test checks which
            reply({"ok": False, "error": type(error).__name__, "message": str(error)})
            continue
        reply({"ok": True, "model_input": model.seen[calls]})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", choices=["openai", "strands", "strands-snapshot"], required=True)
    parser.add_argument("--store", required=True, help="a local directory")
    parser.add_argument("--session", required=True)
    parser.add_argument("--label", required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))

    from evstore import LocalStore, Store

    store = Store(LocalStore(Path(args.store)))
    if args.framework == "openai":
        openai_worker(store, args.session, args.label)
    else:
        strands_worker(store, args.session, args.label, snapshots=args.framework == "strands-snapshot")


if __name__ == "__main__":
    main()
