"""infra/: the MinIO compose file and the CloudFormation template.

Docker does not run here, so the compose file is checked as data: its services,
the bucket its init container makes, and the lifecycle rule it imports, which
must be the rule ``evstore lifecycle apply`` installs.

The CloudFormation template is linted with cfn-lint, compared with infra/iam
and evstore's lifecycle rules, and deployed into moto's CloudFormation, where
evstore then runs against the bucket it made. moto's ``AWS::S3::Bucket``
applies only ``BucketEncryption`` and ``Tags`` (moto/s3/models.py
``create_from_cloudformation_json``): ``LifecycleConfiguration``,
``PublicAccessBlockConfiguration`` and ``OwnershipControls`` are ignored, and
``AWS::S3::BucketPolicy`` is not supported (a UserWarning, silenced where the
stack is made). Those parts are checked in the template itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML (from cfn-lint and moto[server]) ships no stubs

from evstore import Store, StoreUnavailableError, open_store
from evstore._backends._s3 import S3Store
from evstore._lifecycle import DEFAULT_ABORT_DAYS, DEFAULT_EPHEMERAL_DAYS, RETENTION_TAG, evstore_rules

from .test_least_privilege import iam_authentication, load_render, s3_client, store_as, user_with_policy

# one module-scoped run serves every test here: one xdist worker runs them all
pytestmark = pytest.mark.xdist_group("test_infra")

INFRA = Path(__file__).resolve().parent.parent / "infra"
COMPOSE = INFRA / "docker-compose.yml"
TEMPLATE = INFRA / "cloudformation.yaml"
render = load_render()


def user(text: str) -> dict[str, object]:
    return {"role": "user", "content": text}


# ---- docker-compose.yml ------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return document


def compose_bucket(compose: dict[str, Any]) -> str:
    return str(compose["services"]["init"]["environment"]["EVSTORE_BUCKET"])


def imported_rules(compose: dict[str, Any]) -> list[dict[str, Any]]:
    """The lifecycle configuration the init container imports (the config mounted where it reads it)."""
    init = compose["services"]["init"]
    (mount,) = [m for m in init["configs"] if m["target"] in init["command"][0]]
    rules: list[dict[str, Any]] = json.loads(compose["configs"][mount["source"]]["content"])["Rules"]
    return rules


def test_compose_runs_minio_with_a_healthcheck(compose: dict[str, Any]) -> None:
    minio = compose["services"]["minio"]
    assert "minio/minio:" in minio["image"]
    assert minio["command"][:2] == ["server", "/data"]
    assert minio["healthcheck"]["test"]


def test_compose_publishes_minio_on_loopback_only(compose: dict[str, Any]) -> None:
    assert all(str(port).startswith("127.0.0.1:") for port in compose["services"]["minio"]["ports"])


def test_compose_init_waits_for_a_healthy_minio(compose: dict[str, Any]) -> None:
    init = compose["services"]["init"]
    assert "minio/mc:" in init["image"]
    assert init["depends_on"] == {"minio": {"condition": "service_healthy"}}


def test_compose_init_makes_the_bucket_and_imports_the_rules(compose: dict[str, Any]) -> None:
    script = compose["services"]["init"]["command"][0]
    lines = [line.strip() for line in script.splitlines()]
    assert "set -e" in lines
    assert 'mc mb --ignore-existing "local/$$EVSTORE_BUCKET"' in lines
    assert 'mc ilm import "local/$$EVSTORE_BUCKET" < /evstore/lifecycle.json' in lines
    assert compose_bucket(compose) == "evstore"


def test_compose_lifecycle_rule_is_the_one_evstore_installs(compose: dict[str, Any]) -> None:
    ephemeral, _abort = evstore_rules("evstore/sessions/", DEFAULT_EPHEMERAL_DAYS)
    assert imported_rules(compose) == [ephemeral]


def test_compose_lifecycle_rule_filters_on_the_ephemeral_tag_under_sessions(compose: dict[str, Any]) -> None:
    (rule,) = imported_rules(compose)
    assert rule["Filter"]["And"] == {"Prefix": "evstore/sessions/", "Tags": [{"Key": RETENTION_TAG, "Value": "ephemeral"}]}
    assert rule["Expiration"] == {"Days": 90}


def test_compose_minio_aborts_stale_uploads_after_evstores_abort_days(compose: dict[str, Any]) -> None:
    """MinIO drops AbortIncompleteMultipartUpload from lifecycle rules; its own stale-upload expiry stands in."""
    environment = compose["services"]["minio"]["environment"]
    assert environment["MINIO_API_STALE_UPLOADS_EXPIRY"] == f"{DEFAULT_ABORT_DAYS * 24}h"


# ---- cloudformation.yaml: the template -----------------------------------------------------


class _CfnLoader(yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML loader that reads CloudFormation's short forms (!Sub, !Ref, !GetAtt, ...) as long forms."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = str(value).split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    document: dict[str, Any] = yaml.load(TEMPLATE.read_text(encoding="utf-8"), Loader=_CfnLoader)
    return document


def unsub(value: Any) -> Any:
    """``value`` with every ``{"Fn::Sub": text}`` replaced by ``text`` (placeholders kept)."""
    if isinstance(value, dict):
        if set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
            return value["Fn::Sub"]
        return {key: unsub(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unsub(item) for item in value]
    return value


def as_s3_rules(cfn_rules: list[dict[str, Any]], prefix: str, ephemeral_days: int) -> list[dict[str, Any]]:
    """CloudFormation's LifecycleConfiguration rules as the S3 API returns them, for given parameters."""

    def text(value: Any) -> Any:
        if value == {"Ref": "EphemeralDays"}:
            return ephemeral_days
        value = unsub(value)
        return value.replace("${Prefix}", prefix) if isinstance(value, str) else value

    rules = []
    for cfn in cfn_rules:
        rule: dict[str, Any] = {"ID": text(cfn["Id"]), "Status": cfn["Status"]}
        if cfn.get("TagFilters"):
            rule["Filter"] = {"And": {"Prefix": text(cfn["Prefix"]), "Tags": cfn["TagFilters"]}}
        else:
            rule["Filter"] = {"Prefix": text(cfn["Prefix"])}
        if "ExpirationInDays" in cfn:
            rule["Expiration"] = {"Days": text(cfn["ExpirationInDays"])}
        if "AbortIncompleteMultipartUpload" in cfn:
            rule["AbortIncompleteMultipartUpload"] = cfn["AbortIncompleteMultipartUpload"]
        rules.append(rule)
    return rules


def cfn_lint() -> list[str]:
    """cfn-lint from the interpreter running the tests (its console script is cfnlint.runner:main)."""
    return [sys.executable, "-c", "import sys; from cfnlint.runner import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def lint_findings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """cfn-lint's findings (parseable format) for the template and for a copy broken on purpose, in one run."""
    broken = tmp_path_factory.mktemp("cfn") / "broken.yaml"
    broken.write_text(TEMPLATE.read_text(encoding="utf-8").replace("      OwnershipControls:", "      Ownership:"))
    result = subprocess.run(
        [*cfn_lint(), "--format", "parseable", str(TEMPLATE), str(broken)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode in (0, 2, 4, 6, 8, 10, 12, 14), result.stderr  # bit flags: 2 error, 4 warning, 8 info
    findings: dict[str, list[str]] = {"template": [], "broken": []}
    for line in result.stdout.splitlines():
        findings["broken" if line.startswith(str(broken)) else "template"].append(line)
    return findings


@pytest.mark.slow
def test_cloudformation_passes_cfn_lint(lint_findings: dict[str, list[str]]) -> None:
    assert lint_findings["template"] == []


def test_cfn_lint_catches_a_broken_template(lint_findings: dict[str, list[str]]) -> None:
    """The lint step can fail: a bucket with an unknown property is an error."""
    assert any(":E" in line for line in lint_findings["broken"]), lint_findings["broken"]


def test_cloudformation_parameters_and_defaults(template: dict[str, Any]) -> None:
    parameters = template["Parameters"]
    assert parameters["BucketName"]["Default"] == ""
    assert parameters["Prefix"]["Default"] == "evstore"
    assert parameters["EphemeralDays"]["Default"] == DEFAULT_EPHEMERAL_DAYS


@pytest.mark.parametrize(
    ("role", "resource"),
    [("writer", "WriterPolicy"), ("auditor", "AuditorPolicy"), ("operator", "OperatorPolicy"), ("lifecycle", "LifecyclePolicy")],
)
def test_cloudformation_policy_is_the_infra_iam_template(template: dict[str, Any], role: str, resource: str) -> None:
    policy = template["Resources"][resource]
    assert policy["Type"] == "AWS::IAM::ManagedPolicy"
    assert unsub(policy["Properties"]["PolicyDocument"]) == render.template(role)


def test_cloudformation_lifecycle_rules_are_the_ones_evstore_installs(template: dict[str, Any]) -> None:
    cfn_rules = template["Resources"]["Bucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    for prefix, days in (("evstore", 90), ("team/agents", 7)):
        assert as_s3_rules(cfn_rules, prefix, days) == evstore_rules(f"{prefix}/sessions/", days)


def test_cloudformation_bucket_blocks_public_access(template: dict[str, Any]) -> None:
    block = template["Resources"]["Bucket"]["Properties"]["PublicAccessBlockConfiguration"]
    assert block == {"BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}


def test_cloudformation_bucket_is_unversioned_and_sse_s3_encrypted(template: dict[str, Any]) -> None:
    properties = template["Resources"]["Bucket"]["Properties"]
    assert "VersioningConfiguration" not in properties
    (encryption,) = properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}


def test_cloudformation_bucket_policy_denies_requests_without_tls(template: dict[str, Any]) -> None:
    policy = template["Resources"]["BucketPolicy"]["Properties"]
    assert policy["Bucket"] == {"Ref": "Bucket"}
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Deny" and statement["Principal"] == "*" and statement["Action"] == "s3:*"
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert statement["Resource"] == [{"Fn::GetAtt": ["Bucket", "Arn"]}, {"Fn::Sub": "${Bucket.Arn}/*"}]


def test_cloudformation_outputs_bucket_store_url_and_policy_arns(template: dict[str, Any]) -> None:
    outputs = {name: output["Value"] for name, output in template["Outputs"].items()}
    assert outputs == {
        "BucketName": {"Ref": "Bucket"},
        "StoreUrl": {"Fn::Sub": "s3://${Bucket}/${Prefix}"},
        "WriterPolicyArn": {"Ref": "WriterPolicy"},
        "AuditorPolicyArn": {"Ref": "AuditorPolicy"},
        "OperatorPolicyArn": {"Ref": "OperatorPolicy"},
        "LifecyclePolicyArn": {"Ref": "LifecyclePolicy"},
    }


# ---- cloudformation.yaml deployed into moto ------------------------------------------------


@dataclass
class Stack:
    outputs: dict[str, str]
    template: dict[str, Any]

    @property
    def bucket(self) -> str:
        return self.outputs["BucketName"]


def deploy(parameters: dict[str, str]) -> Stack:
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    name = f"evstore-{uuid.uuid4().hex[:8]}"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Tried to parse AWS::S3::BucketPolicy", category=UserWarning)
        cloudformation.create_stack(
            StackName=name,
            TemplateBody=TEMPLATE.read_text(encoding="utf-8"),
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        )
    (stack,) = cloudformation.describe_stacks(StackName=name)["Stacks"]
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
    return Stack(outputs, yaml.load(TEMPLATE.read_text(encoding="utf-8"), Loader=_CfnLoader))


@pytest.fixture
def stack() -> Iterator[Stack]:
    from moto import mock_aws

    with mock_aws():
        yield deploy({"BucketName": f"evs-{uuid.uuid4().hex[:12]}", "Prefix": "agents"})


@pytest.mark.slow
def test_deployed_stack_outputs_the_store_url(stack: Stack) -> None:
    assert stack.outputs["StoreUrl"] == f"s3://{stack.bucket}/agents"


def test_deployed_stack_without_a_bucket_name_gets_one(stack: Stack) -> None:
    unnamed = deploy({})
    assert unnamed.bucket != stack.bucket
    assert unnamed.outputs["StoreUrl"] == f"s3://{unnamed.bucket}/evstore"


def test_deployed_bucket_is_sse_s3_encrypted(stack: Stack) -> None:
    encryption = boto3.client("s3", region_name="us-east-1").get_bucket_encryption(Bucket=stack.bucket)
    (rule,) = encryption["ServerSideEncryptionConfiguration"]["Rules"]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"


def test_evstore_appends_replays_and_forks_on_the_deployed_bucket(stack: Stack) -> None:
    store = open_store(stack.outputs["StoreUrl"])
    session = store.open("chat", create=True)
    session.append(user("hello"))
    session.append(user("again"))
    store.fork("chat", "chat-b", at=1).append(user("other"))
    assert [e.seq for e in store.replay("chat")] == [1, 2]
    assert [m["content"] for m in store.context("chat-b")] == ["hello", "other"]
    keys = [o["Key"] for o in boto3.client("s3", region_name="us-east-1").list_objects_v2(Bucket=stack.bucket)["Contents"]]
    assert all(key.startswith("agents/sessions/") for key in keys)


def test_template_lifecycle_rules_make_evstore_lifecycle_apply_a_no_op(stack: Stack) -> None:
    """On AWS the stack installs its rules; `evstore lifecycle apply` must then find nothing to add.
    moto skips LifecycleConfiguration, so the test installs the template's rules as CloudFormation would."""
    cfn_rules = stack.template["Resources"]["Bucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    backend = S3Store(stack.bucket)
    backend.put_lifecycle(as_s3_rules(cfn_rules, "agents", DEFAULT_EPHEMERAL_DAYS))
    changed, rules = Store(backend, root="agents").apply_lifecycle(DEFAULT_EPHEMERAL_DAYS)
    assert not changed
    assert backend.get_lifecycle() == rules == evstore_rules("agents/sessions/", DEFAULT_EPHEMERAL_DAYS)


@pytest.mark.slow
def test_evstore_lifecycle_apply_on_the_deployed_bucket_reads_back_the_template_rules(stack: Stack) -> None:
    cfn_rules = stack.template["Resources"]["Bucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    store = open_store(stack.outputs["StoreUrl"])
    store.apply_lifecycle(DEFAULT_EPHEMERAL_DAYS)
    assert store.lifecycle_rules() == as_s3_rules(cfn_rules, "agents", DEFAULT_EPHEMERAL_DAYS)


@pytest.mark.slow
@pytest.mark.parametrize("role", ["writer", "auditor", "operator", "lifecycle"])
def test_deployed_policy_is_the_rendered_policy(stack: Stack, role: str) -> None:
    iam = boto3.client("iam", region_name="us-east-1")
    arn = stack.outputs[f"{role.capitalize()}PolicyArn"]
    version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
    document = iam.get_policy_version(PolicyArn=arn, VersionId=version)["PolicyVersion"]["Document"]
    assert document == render.render(role, bucket=stack.bucket, prefix="agents")


def test_deployed_writer_policy_lets_evstore_write_and_denies_delete(stack: Stack) -> None:
    iam = boto3.client("iam", region_name="us-east-1")
    credentials = user_with_policy(iam, "agent", policy_arn=stack.outputs["WriterPolicyArn"])
    with iam_authentication():
        store = store_as(credentials, stack.bucket, root="agents")
        store.open("chat", create=True).append(user("hello"))
        assert [m["content"] for m in store.context("chat")] == ["hello"]
        with pytest.raises(StoreUnavailableError, match="access denied"):
            store.delete("chat")
        with pytest.raises(botocore.exceptions.ClientError):
            s3_client(credentials).delete_object(Bucket=stack.bucket, Key=f"agents/sessions/chat/{1:020d}")
