"""Strands' pieces for ``benchmarks/resume.py`` (imported lazily: the parent needs Strands only for setup):
a model never called, an agent, the exact objects its session managers write, and their clients."""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks._data import strands_message
from benchmarks.studies.resume.plan import AGENT_ID, Item


def quiet_model() -> Any:
    """A Strands model that is never called (resume does not call the model)."""
    from strands.models import Model

    class Unused(Model):
        def update_config(self, **model_config: Any) -> None:
            pass

        def get_config(self) -> Any:
            return {"model_id": "unused"}

        def structured_output(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        def stream(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return Unused()


def strands_agent(messages: list[dict[str, Any]] | None = None) -> Any:
    from strands import Agent

    history: Any = messages or []  # Strands' Message is a TypedDict of this shape
    return Agent(model=quiet_model(), agent_id=AGENT_ID, messages=history, callback_handler=None)


class _CaptureClient:
    """Stands in for boto3 under S3SessionManager during setup: keeps what it PUTs, finds nothing."""

    def __init__(self) -> None:
        self.objects: list[Item] = []

    def put_object(self, *, Key: str, Body: bytes, **kwargs: Any) -> None:
        self.objects.append((Key, Body, {}))

    def _missing(self, code: str, operation: str) -> None:
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": code, "Message": "not found"}}, operation)

    def head_object(self, **kwargs: Any) -> None:
        self._missing("404", "HeadObject")

    def get_object(self, **kwargs: Any) -> None:
        self._missing("NoSuchKey", "GetObject")


def strands_s3_objects(bucket: str, sid: str, n: int) -> list[Item]:
    """The exact objects S3SessionManager writes for an agent that appended n messages."""
    from strands.session.s3_session_manager import S3SessionManager
    from strands.types.session import Session, SessionAgent, SessionMessage, SessionType

    capture = _CaptureClient()
    # S3SessionManager's own serialization and keys, with its client swapped for the capture (no network):
    # __init__ would make a boto3 client and read the session first, so the repository is set up by hand.
    repo = S3SessionManager.__new__(S3SessionManager)
    repo.bucket, repo.prefix, repo.client = bucket, "", capture
    repo.create_session(Session(session_id=sid, session_type=SessionType.AGENT))
    repo.create_agent(sid, SessionAgent.from_agent(strands_agent()))
    for i in range(n):
        repo.create_message(sid, AGENT_ID, SessionMessage.from_message(strands_message(i), i))  # type: ignore[arg-type]
    return capture.objects


def strands_snapshot_objects(sid: str, n: int) -> list[Item]:
    """The exact object(s) SnapshotSessionManager saves for an agent holding n messages."""
    from strands.session.snapshot_session_manager import SnapshotSessionManager
    from strands.storage.in_memory_storage import InMemoryStorage

    memory = InMemoryStorage()
    manager = SnapshotSessionManager(sid, storage=memory)
    agent = strands_agent([strands_message(i) for i in range(n)])
    asyncio.run(manager.save_snapshot(agent, is_latest=True))

    async def dump() -> list[Item]:
        out: list[Item] = []
        for key in await memory.list(""):
            data = await memory.read(key)
            assert data is not None
            out.append((key, data, {}))
        return out

    return asyncio.run(dump())  # S3Storage with no prefix stores each key as the object's name


def snapshot_storage(bucket: str, client: Any) -> Any:
    from strands.storage.s3_storage import S3Storage

    storage = S3Storage(bucket)
    storage._client = client  # S3Storage takes no endpoint_url: hand it the client it would make, aimed at the proxy
    return storage


def strands_client(session: Any, endpoint: str) -> Any:
    from botocore.config import Config

    return session.client("s3", endpoint_url=endpoint, config=Config(user_agent_extra="strands-agents"))
