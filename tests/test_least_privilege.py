"""Least privilege: the writer, auditor and operator policies of infra/iam, enforced by moto's IAM.

Each role is an IAM user with its rendered policy attached; evstore runs with
that user's access keys against moto in process (``mock_aws``) with IAM
authentication on (``moto.core.enable_iam_authentication``: every request is
signature-checked and authorized against the caller's policies).

What moto 5.x enforces, and what it does not (read from moto's
``iam/access_control.py``, ``core/authorization.py`` and ``s3/responses.py``,
and confirmed by the tests below):

* Enforced: actions (S3 API call -> IAM action name, e.g. GetBucketLifecycleConfiguration
  -> ``s3:GetLifecycleConfiguration``, HeadObject -> ``s3:GetObject``), resources
  (object ARNs ``bucket/key``, the bucket ARN for bucket-level calls, ``*``
  wildcards), explicit Deny over Allow, and the default deny.
* NOT evaluated: every ``Condition`` of an identity policy on S3 calls. moto
  passes no request context to the evaluator, and a condition with no context
  value counts as met. So ``s3:if-none-match`` = ``*`` (the writer's
  no-overwrite guard), ``s3:if-match`` (the operator's conditional replace),
  ``s3:prefix`` on ListBucket and the object-tag conditions are all treated as
  satisfied: in moto the writer CAN overwrite an object with a plain PUT and can
  LIST outside its prefix. On AWS these conditions hold (S3 documents the
  ``s3:if-none-match``/``s3:if-match`` keys for PutObject and
  CompleteMultipartUpload since 2024-11); ``test_writer_policy_only_allows_create_if_none_match``
  checks that the shipped policy says so, and
  ``test_moto_lets_the_writer_overwrite_because_it_ignores_if_none_match_condition`` pins moto's gap.
* Divergent: moto authorizes DeleteObjects (batch delete, which evstore uses)
  once, as ``s3:DeleteObject`` on the BUCKET ARN; AWS authorizes each key as
  ``s3:DeleteObject`` on its object ARN. ``for_moto`` below therefore adds the
  bucket ARN to every Allow of ``s3:DeleteObject`` before the policy is given to
  moto. The shipped policies stay AWS-correct; a role without ``s3:DeleteObject``
  (writer, auditor) is unaffected by the shim.
* Divergent since moto 5.2.6: an S3 request is authorized under its API
  operation's name (``s3:ListObjectsV2``, ``s3:GetBucketLifecycleConfiguration``,
  ``s3:ListMultipartUploads``) instead of the IAM action AWS checks
  (``s3:ListBucket``, ``s3:GetLifecycleConfiguration``,
  ``s3:ListBucketMultipartUploads``), so an AWS-correct policy is refused calls
  AWS allows. moto still works the IAM action out (its ``ACTION_MAP``, into the
  request's ``Action``); ``iam_authentication`` below hands that name to the
  check, as moto 5.1 to 5.2.5 did.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from evstore import Keyring, SessionNotFoundError, Store, StoreUnavailableError, generate_key
from evstore._backends._s3 import S3Store
from evstore._context import FENCE_HOLD
from evstore._lifecycle import evstore_rules

REPO = Path(__file__).resolve().parent.parent
ROOT = "evstore"
RETENTION_TAG = "evstore-retention"


def load_render() -> ModuleType:
    """infra/iam/render.py, loaded by path (infra is not a package)."""
    spec = importlib.util.spec_from_file_location("evstore_infra_iam_render", REPO / "infra" / "iam" / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = load_render()


def for_moto(policy: dict[str, Any], bucket: str) -> dict[str, Any]:
    """``policy`` with the bucket ARN added to each Allow of s3:DeleteObject (see the module docstring)."""
    adapted = copy.deepcopy(policy)
    for statement in adapted["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if statement["Effect"] == "Allow" and "s3:DeleteObject" in actions:
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            statement["Resource"] = [*resources, f"arn:aws:s3:::{bucket}"]
    return adapted


@contextmanager
def iam_authentication() -> Iterator[None]:
    """moto's IAM authentication on, each S3 request authorized under its IAM action (see the module docstring)."""
    from moto.core import enable_iam_authentication
    from moto.iam.access_control import S3IAMRequest

    authorize = S3IAMRequest.__init__

    def under_iam_action(self: S3IAMRequest, **request: Any) -> None:
        iam_action = request["data"].get("Action") if hasattr(request["data"], "get") else None
        if isinstance(iam_action, str):
            request["action"] = iam_action
        authorize(self, **request)

    with mock.patch.object(S3IAMRequest, "__init__", under_iam_action), enable_iam_authentication():
        yield


def user_with_policy(iam: Any, name: str, *, policy_arn: str) -> tuple[str, str]:
    """An IAM user with ``policy_arn`` attached; return its access key id and secret."""
    iam.create_user(UserName=name)
    iam.attach_user_policy(UserName=name, PolicyArn=policy_arn)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return str(key["AccessKeyId"]), str(key["SecretAccessKey"])


def s3_client(credentials: tuple[str, str]) -> Any:
    return boto3.client(
        "s3",
        region_name="us-east-1",
        aws_access_key_id=credentials[0],
        aws_secret_access_key=credentials[1],
        config=Config(retries={"mode": "standard", "max_attempts": 2}),
    )


def store_as(credentials: tuple[str, str], bucket: str, root: str = ROOT) -> Store:
    return Store(S3Store(bucket, client=s3_client(credentials)), root=root)


def error_code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response["Error"]["Code"])


@dataclass
class Roles:
    bucket: str
    credentials: dict[str, tuple[str, str]] = field(default_factory=dict)

    def store(self, role: str) -> Store:
        return store_as(self.credentials[role], self.bucket)

    def client(self, role: str) -> Any:
        return s3_client(self.credentials[role])


@pytest.fixture
def roles() -> Iterator[Roles]:
    """A bucket and one IAM user per role (policies rendered for ``s3://bucket/evstore``), IAM auth on."""
    from moto import mock_aws

    with mock_aws():
        bucket = f"evs-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket)
        iam = boto3.client("iam", region_name="us-east-1")
        world = Roles(bucket)
        for role in render.ROLES:
            document = for_moto(render.render(role, bucket=bucket, prefix=ROOT), bucket)
            arn = iam.create_policy(PolicyName=f"evstore-{role}", PolicyDocument=json.dumps(document))["Policy"]["Arn"]
            world.credentials[role] = user_with_policy(iam, f"evstore-{role}", policy_arn=arn)
        with iam_authentication():
            yield world


def admin_put(bucket: str, key: str, body: bytes) -> None:
    """A write as the account's root (outside the roles), with IAM checks off for that one call."""
    from moto.core import disable_iam_authentication

    with disable_iam_authentication():
        boto3.client("s3", region_name="us-east-1").put_object(Bucket=bucket, Key=key, Body=body)


def user(text: str) -> dict[str, object]:
    return {"role": "user", "content": text}


# ---- the shipped policies, as AWS evaluates them ------------------------------------------


def statements_allowing(policy: dict[str, Any], action: str) -> list[dict[str, Any]]:
    found = []
    for statement in policy["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if statement["Effect"] == "Allow" and any(a == action or a in ("s3:*", "*") for a in actions):
            found.append(statement)
    return found


def test_writer_policy_only_allows_create_if_none_match() -> None:
    policy = render.render("writer", bucket="my-bucket", prefix=ROOT)
    puts = statements_allowing(policy, "s3:PutObject")
    assert puts, "the writer must be able to create objects"
    assert all(s["Condition"] == {"StringEquals": {"s3:if-none-match": "*"}} for s in puts)


def test_writer_may_create_only_events_manifests_fork_markers_and_segments() -> None:
    """The writer never needs a rekey record, salt object or tombstone: its PutObject names the
    four kinds it writes (segments: writers compact as they append, and readers trust a segment
    only when it matches the events it stands for), and an explicit Deny backs that up, because
    IAM's ``*`` also matches '/' (``sessions/*/0*`` would match ``sessions/s/rekeys/0...``)."""
    policy = render.render("writer", bucket="my-bucket", prefix=ROOT)
    (put,) = statements_allowing(policy, "s3:PutObject")
    sessions = f"arn:aws:s3:::my-bucket/{ROOT}/sessions/"
    assert sorted(resources_of(put)) == sorted(
        [
            sessions + "*/0*",
            sessions + "*/manifest",
            sessions + "*/forks/*",
            sessions + "*/segments/*",
            sessions + "*/young/*",
            sessions + "*/ztree/*",
        ]
    )
    (deny,) = [s for s in policy["Statement"] if s["Effect"] == "Deny" and s["Action"] == "s3:PutObject"]
    assert "Condition" not in deny
    assert sorted(resources_of(deny)) == sorted([sessions + "*/tombstone", sessions + "*/rekeys/*", sessions + "*/salt"])


def test_writer_may_tag_only_at_put_and_never_retag_a_tagged_object() -> None:
    """Tagging at PUT needs ``s3:PutObjectTagging`` too, so the writer has it, limited to the one
    retention tag; the Deny refuses it wherever the object already carries that tag (S3 evaluates
    ``s3:ExistingObjectTag`` for PutObjectTagging, and documents it as unsupported for PUT Object,
    so creating a tagged object is unaffected). Objects created without the tag stay re-taggable:
    see infra/README.md."""
    policy = render.render("writer", bucket="my-bucket", prefix=ROOT)
    (allow,) = statements_allowing(policy, "s3:PutObjectTagging")
    assert allow["Condition"] == {
        "ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": [RETENTION_TAG]},
        "StringEquals": {f"s3:RequestObjectTag/{RETENTION_TAG}": ["ephemeral", "permanent"]},
    }
    (deny,) = [s for s in policy["Statement"] if s["Effect"] == "Deny" and s["Action"] == "s3:PutObjectTagging"]
    assert deny["Condition"] == {"Null": {f"s3:ExistingObjectTag/{RETENTION_TAG}": "false"}}
    assert resources_of(deny) == resources_of(allow)


def test_only_the_lifecycle_role_may_change_lifecycle_rules() -> None:
    """A lifecycle configuration is one bucket-wide document: IAM can name only the bucket, so the
    right lives in its own policy, which no everyday role carries."""
    for role in render.ROLES:
        policy = render.render(role, bucket="my-bucket", prefix=ROOT)
        granted = statements_allowing(policy, "s3:PutLifecycleConfiguration")
        assert (granted != []) == (role == "lifecycle"), role
    lifecycle = render.render("lifecycle", bucket="my-bucket", prefix=ROOT)
    assert [resources_of(s) for s in lifecycle["Statement"]] == [["arn:aws:s3:::my-bucket"]]
    assert statements_allowing(lifecycle, "s3:PutObject") == statements_allowing(lifecycle, "s3:GetObject") == []


def test_listing_multipart_uploads_can_only_name_the_bucket() -> None:
    """ListBucketMultipartUploads takes no ``s3:prefix`` condition: the operator's grant names the
    bucket and shows upload key names bucket-wide (no content); infra/README.md says so."""
    operator = render.render("operator", bucket="my-bucket", prefix=ROOT)
    (statement,) = statements_allowing(operator, "s3:ListBucketMultipartUploads")
    assert resources_of(statement) == ["arn:aws:s3:::my-bucket"]
    assert "Condition" not in statement


def test_writer_and_auditor_policies_grant_no_delete_or_lifecycle_change() -> None:
    for role in ("writer", "auditor"):
        policy = render.render(role, bucket="my-bucket", prefix=ROOT)
        for action in ("s3:DeleteObject", "s3:PutLifecycleConfiguration", "s3:AbortMultipartUpload", "s3:PutBucketPolicy"):
            assert statements_allowing(policy, action) == [], (role, action)


def test_auditor_policy_grants_no_write() -> None:
    policy = render.render("auditor", bucket="my-bucket", prefix=ROOT)
    for action in ("s3:PutObject", "s3:PutObjectTagging"):
        assert statements_allowing(policy, action) == []


def test_operator_replace_requires_if_match() -> None:
    policy = render.render("operator", bucket="my-bucket", prefix=ROOT)
    conditions = [s["Condition"] for s in statements_allowing(policy, "s3:PutObject")]
    assert sorted(conditions, key=json.dumps) == sorted(
        [{"StringEquals": {"s3:if-none-match": "*"}}, {"Null": {"s3:if-match": "false"}}], key=json.dumps
    )


def resources_of(statement: dict[str, Any]) -> list[str]:
    return statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]


def test_every_object_resource_is_scoped_to_the_store_sessions_prefix() -> None:
    sessions = "arn:aws:s3:::my-bucket/team/evstore/sessions/"
    for role in render.ROLES:
        policy = render.render(role, bucket="my-bucket", prefix="team/evstore")
        for statement in policy["Statement"]:
            for resource in resources_of(statement):
                assert resource == "arn:aws:s3:::my-bucket" or resource.startswith(sessions + "*"), (role, resource)
            if "s3:ListBucket" in (statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]):
                assert statement["Condition"] == {"StringLike": {"s3:prefix": "team/evstore/sessions/*"}}


def test_render_without_prefix_scopes_to_sessions_at_the_bucket_root() -> None:
    policy = render.render("auditor", bucket="my-bucket", prefix="")
    assert policy["Statement"][0]["Resource"] == "arn:aws:s3:::my-bucket/sessions/*"
    assert policy["Statement"][1]["Condition"] == {"StringLike": {"s3:prefix": "sessions/*"}}


def test_render_refuses_a_prefix_with_wildcards() -> None:
    with pytest.raises(ValueError, match="prefix"):
        render.render("writer", bucket="my-bucket", prefix="evstore/*")


def test_render_leaves_no_placeholder() -> None:
    for role in render.ROLES:
        text = json.dumps(render.render(role, bucket="my-bucket", prefix=ROOT, partition="aws-cn"))
        assert "${" not in text
        assert "arn:aws-cn:s3:::my-bucket" in text


# ---- writer --------------------------------------------------------------------------------


def test_writer_can_create_append_and_replay(roles: Roles) -> None:
    store = roles.store("writer")
    session = store.open("chat", create=True)
    session.append(user("hello"))
    session.append([user("two"), user("three")])
    assert [m["content"] for m in store.context("chat")] == ["hello", "two", "three"]


def test_writer_can_create_an_ephemeral_session(roles: Roles) -> None:
    store = roles.store("writer")
    store.open("scratch", create=True, retention="ephemeral").append(user("tmp"))
    assert store.info("scratch").retention == "ephemeral"


def test_writer_can_fork(roles: Roles) -> None:
    store = roles.store("writer")
    parent = store.open("parent", create=True)
    parent.append(user("a"))
    parent.append(user("b"))
    child = store.fork("parent", "child", at=1)
    child.append(user("c"))
    assert [m["content"] for m in store.context("child")] == ["a", "c"]
    assert store.info("parent").forks == ["child"]


def test_writer_can_resume_a_session_from_another_process(roles: Roles) -> None:
    roles.store("writer").open("chat", create=True).append(user("first"))
    resumed = roles.store("writer").open("chat")
    resumed.append(user("second"))
    assert resumed.head == 2


@pytest.mark.slow
def test_writer_cannot_delete_an_object(roles: Roles) -> None:
    store = roles.store("writer")
    store.open("chat", create=True).append(user("keep me"))
    key = f"{ROOT}/sessions/chat/{1:020d}"
    with pytest.raises(botocore.exceptions.ClientError) as denied:
        roles.client("writer").delete_object(Bucket=roles.bucket, Key=key)
    assert error_code(denied.value) == "AccessDenied"
    assert [m["content"] for m in store.context("chat")] == ["keep me"]


def test_writer_cannot_delete_a_session(roles: Roles) -> None:
    """The tombstone is a create like any other: the writer policy denies it by name."""
    store = roles.store("writer")
    store.open("chat", create=True).append(user("keep me"))
    with pytest.raises(StoreUnavailableError, match="access denied"):
        store.delete("chat")
    assert [m["content"] for m in store.context("chat")] == ["keep me"]


def test_writer_cannot_write_outside_the_store_prefix(roles: Roles) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as denied:
        roles.client("writer").put_object(Bucket=roles.bucket, Key="elsewhere/x", Body=b"x", IfNoneMatch="*")
    assert error_code(denied.value) == "AccessDenied"


def test_writer_cannot_use_another_store_root_in_the_same_bucket(roles: Roles) -> None:
    other = store_as(roles.credentials["writer"], roles.bucket, root="other-team")
    with pytest.raises(StoreUnavailableError, match="access denied"):
        other.open("chat", create=True)


def test_writer_cannot_change_lifecycle_rules(roles: Roles) -> None:
    backend = S3Store(roles.bucket, client=roles.client("writer"))
    rule = {"ID": "wipe", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Days": 1}}
    with pytest.raises(StoreUnavailableError, match="access denied"):
        backend.put_lifecycle([rule])


def test_writer_cannot_abort_uploads(roles: Roles) -> None:
    backend = S3Store(roles.bucket, client=roles.client("writer"))
    with pytest.raises(StoreUnavailableError, match="access denied"):
        backend.abort_upload(f"{ROOT}/sessions/chat/big", "some-upload-id")


@pytest.mark.parametrize(
    "name",
    [
        f"rekeys/{'0' * 20}",
        "salt",
        "tombstone",
        "junk",
        "9" * 20,  # a seq past any a real session reaches: IAM keeps a writer from planting the head at the maximum
        "forks-not-a-marker",
    ],
)
def test_writer_cannot_create_objects_it_does_not_need(roles: Roles, name: str) -> None:
    """Enforced by moto: these are resource matches and an unconditional Deny."""
    roles.store("writer").open("chat", create=True).append(user("real"))
    backend = S3Store(roles.bucket, client=roles.client("writer"))
    with pytest.raises(StoreUnavailableError, match="access denied"):
        backend.create(f"{ROOT}/sessions/chat/{name}", b"{}")
    assert [o.key.rsplit("/", 1)[-1] for o in backend.list(f"{ROOT}/sessions/chat/")] == [f"{1:020d}", "manifest"]


def test_writer_compacts_as_it_appends_and_can_compact(roles: Roles) -> None:
    """Writers pack segments by default; a segment can neither overwrite (If-None-Match) nor
    change what readers return (their chain must end in the loose event at the last seq of its group)."""
    store = roles.store("writer")
    session = store.open("chat", create=True)
    for i in range(40):
        session.append(user(f"m{i}"))
    assert store.info("chat").segments == 1  # 1-32, written as the 32nd append landed
    assert store.compact("chat", segment_size=4) == [(33, 36), (37, 40)]
    assert [m["content"] for m in store.context("chat")] == [f"m{i}" for i in range(40)]


@pytest.mark.slow
def test_writer_writes_merkle_checkpoint_objects_and_the_auditor_checks_from_them(roles: Roles) -> None:
    """The checkpoint object at 256 events is created by the writer role (``ztree/*``, If-None-Match
    only), and read by the read-only auditor for a tree head check in a few requests."""
    session = roles.store("writer").open("chat", create=True)
    for i in range(256):
        session.append(user(f"m{i}"))
    auditor = roles.store("auditor")
    assert auditor.tree_head("chat", checkpoint=True) == auditor.tree_head("chat")
    check = auditor.verify_tree("chat", auditor.tree_head("chat", size=100))
    assert check.stored and check.tree_head.size == 256


def test_operator_can_compact(audited: Roles) -> None:
    assert audited.store("operator").compact("audited", segment_size=3) == [(1, 3)]


@pytest.mark.slow
def test_moto_denies_retagging_even_an_untagged_object_because_it_ignores_conditions(roles: Roles) -> None:
    """Pins moto's gap: moto counts the Deny's ``Null`` condition on ``s3:ExistingObjectTag`` as met,
    so it refuses the writer's PutObjectTagging on every object. On AWS the Deny applies where the
    object already carries ``evstore-retention`` (every ephemeral object); an object created without
    the tag can still be tagged ``ephemeral`` there (infra/README.md). This test therefore shows
    only that the statements parse and that a Deny wins over the Allow."""
    store = roles.store("writer")
    store.open("chat", create=True).append(user("keep"))
    store.open("scratch", create=True, retention="ephemeral").append(user("tmp"))
    client = roles.client("writer")
    for key in (f"{ROOT}/sessions/chat/manifest", f"{ROOT}/sessions/scratch/manifest"):
        with pytest.raises(botocore.exceptions.ClientError) as denied:
            client.put_object_tagging(
                Bucket=roles.bucket, Key=key, Tagging={"TagSet": [{"Key": RETENTION_TAG, "Value": "ephemeral"}]}
            )
        assert error_code(denied.value) == "AccessDenied"


def test_moto_lets_the_writer_overwrite_because_it_ignores_if_none_match_condition(roles: Roles) -> None:
    """Pins moto's gap: on AWS the writer's only PutObject Allow needs ``s3:if-none-match`` = ``*``,
    so this plain overwrite is denied there. moto evaluates no S3 policy condition and lets it
    through. If this test fails, moto has learnt conditions: turn it into a deny test."""
    store = roles.store("writer")
    store.open("chat", create=True).append(user("original"))
    key = f"{ROOT}/sessions/chat/{1:020d}"
    roles.client("writer").put_object(Bucket=roles.bucket, Key=key, Body=b"overwritten")
    assert roles.client("writer").get_object(Bucket=roles.bucket, Key=key)["Body"].read() == b"overwritten"


# ---- auditor -------------------------------------------------------------------------------


@pytest.fixture
def audited(roles: Roles) -> Roles:
    """Two sessions (one a fork) written by the writer, for the auditor to read."""
    store = roles.store("writer")
    session = store.open("audited", create=True)
    for text in ("one", "two", "three"):
        session.append(user(text))
    store.fork("audited", "audited-fork", at=2).append(user("fork"))
    store.open("scratch", create=True, retention="ephemeral").append(user("tmp"))
    return roles


def test_auditor_can_replay(audited: Roles) -> None:
    store = audited.store("auditor")
    assert [e.seq for e in store.replay("audited")] == [1, 2, 3]
    assert [m["content"] for m in store.context("audited-fork")] == ["one", "two", "fork"]


def test_auditor_can_verify(audited: Roles) -> None:
    store = audited.store("auditor")
    receipt = store.verify("audited").receipt
    assert store.verify("audited", expect=receipt).receipt == receipt


def test_auditor_can_list_sessions(audited: Roles) -> None:
    assert sorted(audited.store("auditor").list_sessions()) == ["audited", "audited-fork", "scratch"]


def test_auditor_can_read_tags_and_lifecycle_rules(audited: Roles) -> None:
    backend = S3Store(audited.bucket, client=audited.client("auditor"))
    assert backend.get_tags(f"{ROOT}/sessions/scratch/manifest") == {RETENTION_TAG: "ephemeral"}
    assert backend.get_lifecycle() == []


def test_auditor_cannot_append(audited: Roles) -> None:
    session = audited.store("auditor").open("audited")
    with pytest.raises(StoreUnavailableError, match="access denied"):
        session.append(user("forged"))
    assert [e.seq for e in audited.store("auditor").replay("audited")] == [1, 2, 3]


def test_auditor_cannot_create_a_session(audited: Roles) -> None:
    with pytest.raises(StoreUnavailableError, match="access denied"):
        audited.store("auditor").open("new", create=True)


def test_auditor_cannot_delete_a_session(audited: Roles) -> None:
    with pytest.raises(StoreUnavailableError, match="access denied"):
        audited.store("auditor").delete("audited")


def test_auditor_cannot_delete_an_object(audited: Roles) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as denied:
        audited.client("auditor").delete_object(Bucket=audited.bucket, Key=f"{ROOT}/sessions/audited/manifest")
    assert error_code(denied.value) == "AccessDenied"


def test_auditor_cannot_change_lifecycle_rules(audited: Roles) -> None:
    backend = S3Store(audited.bucket, client=audited.client("auditor"))
    with pytest.raises(StoreUnavailableError, match="access denied"):
        backend.put_lifecycle([])


def test_auditor_cannot_read_outside_the_store_prefix(audited: Roles) -> None:
    admin_put(audited.bucket, "secrets/x", b"x")
    with pytest.raises(botocore.exceptions.ClientError) as denied:
        audited.client("auditor").get_object(Bucket=audited.bucket, Key="secrets/x")
    assert error_code(denied.value) == "AccessDenied"


# ---- operator ------------------------------------------------------------------------------


def test_operator_can_delete_a_session(audited: Roles) -> None:
    store = audited.store("operator")
    assert store.delete("scratch").kept_for_forks == []  # a tombstone and a fence: both PUTs
    with pytest.raises(SessionNotFoundError):
        store.info("scratch")
    store.gc(grace=timedelta(0), now=datetime.now(UTC) + FENCE_HOLD + timedelta(minutes=1))
    assert list(store.backend.list(f"{ROOT}/sessions/scratch/")) == []


def test_operator_delete_keeps_a_parent_with_live_forks(audited: Roles) -> None:
    store = audited.store("operator")
    assert store.delete("audited").kept_for_forks == ["audited-fork"]
    assert [m["content"] for m in store.context("audited-fork")] == ["one", "two", "fork"]


def test_only_the_lifecycle_role_can_apply_lifecycle_rules(roles: Roles) -> None:
    with pytest.raises(StoreUnavailableError, match="access denied"):
        roles.store("operator").apply_lifecycle(ephemeral_days=30)
    store = roles.store("lifecycle")
    changed, rules = store.apply_lifecycle(ephemeral_days=30)
    assert changed
    assert store.lifecycle_rules() == rules == evstore_rules(f"{ROOT}/sessions/", 30)
    assert roles.store("operator").lifecycle_rules() == rules  # gc reads them


def test_operator_can_rekey_a_session(audited: Roles) -> None:
    """Rekey re-seals each event with If-Match on the ETag it read: the operator's conditional replace."""
    keyring = Keyring.from_key(generate_key())
    operator = Store(S3Store(audited.bucket, client=audited.client("operator")), root=ROOT, keyring=keyring)
    assert operator.rekey("audited").resealed == 3
    auditor = Store(S3Store(audited.bucket, client=audited.client("auditor")), root=ROOT, keyring=keyring)
    assert [m["content"] for m in auditor.context("audited")] == ["one", "two", "three"]
    assert all(e.key_id is not None for e in auditor.replay("audited"))


def test_operator_can_gc_a_deleted_session(audited: Roles) -> None:
    store = audited.store("operator")
    assert store.delete("audited").kept_for_forks == ["audited-fork"]
    store.delete("audited-fork")  # the parent's remnants are now gc's to remove
    later = datetime.now(UTC) + FENCE_HOLD + timedelta(minutes=1)
    report = store.gc(grace=timedelta(0), now=later)
    report.objects_removed += store.gc(grace=timedelta(0), now=later).objects_removed  # the fork first, then the parent
    assert report.objects_removed > 0
    assert list(store.backend.list(f"{ROOT}/sessions/audited/")) == []


def test_operator_can_list_and_abort_incomplete_uploads(roles: Roles) -> None:
    from moto.core import disable_iam_authentication

    key = f"{ROOT}/sessions/chat/stale-upload"
    with disable_iam_authentication():
        boto3.client("s3", region_name="us-east-1").create_multipart_upload(Bucket=roles.bucket, Key=key)
    backend = S3Store(roles.bucket, client=roles.client("operator"))
    uploads = list(backend.list_incomplete_uploads(f"{ROOT}/sessions/"))
    assert [u.key for u in uploads] == [key]
    backend.abort_upload(key, uploads[0].upload_id)
    assert list(backend.list_incomplete_uploads(f"{ROOT}/sessions/")) == []


def test_operator_can_replace_an_object_conditionally(roles: Roles) -> None:
    """Re-keying rewrites objects in place with If-Match; the operator may, the writer's policy has no such Allow."""
    backend = S3Store(roles.bucket, client=roles.client("operator"))
    key = f"{ROOT}/sessions/chat/segments/x"
    etag = backend.create(key, b"v1")
    backend.replace(key, b"v2", etag=etag)
    assert backend.get(key).data == b"v2"


def test_operator_cannot_touch_objects_outside_the_store_prefix(roles: Roles) -> None:
    admin_put(roles.bucket, "billing/report", b"x")
    with pytest.raises(botocore.exceptions.ClientError) as denied:
        roles.client("operator").delete_object(Bucket=roles.bucket, Key="billing/report")
    assert error_code(denied.value) == "AccessDenied"
