"""The AWS rung's Terraform module (aws/) holds what a user relies on: each IAM role may call
only what its service calls, the database is encrypted and refuses plain-text connections,
workers drain before ECS kills them, the queues are the ones toren-sqs looks for, and every
reference resolves. (terraform validate cannot run here: aws/ci/check.sh runs fmt and checkov.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import hcl2
import pytest
from toren_sqs.queue import REDRIVE_MARGIN
from toren_sqs.settings import SqsSettings

from toren.agents import discover_agent_dirs, load_agent
from toren.config import Settings
from toren.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "aws"
EXAMPLE = MODULE / "examples" / "minimal"

#: What each role's service calls, and nothing more. Task scale-in protection goes through the
#: ECS agent endpoint inside the task, which calls UpdateTaskProtection with the task role.
ALLOWED_ACTIONS = {
    # ECS pulls the image and ships the containers' logs with it
    "execution": {"ecr:GetAuthorizationToken", "ecr:BatchCheckLayerAvailability",
                  "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "logs:CreateLogStream",
                  "logs:PutLogEvents"},
    # toren serve: reads its secret, and the SQS driver's startup check lists queues
    "api_task": {"secretsmanager:GetSecretValue", "kms:Decrypt", "sqs:ListQueues"},
    # toren worker: its secret, its agents' queues, its scale-in protection, the queue depth
    "worker_task": {"secretsmanager:GetSecretValue", "kms:Decrypt", "sqs:ListQueues",
                    "sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage",
                    "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes", "sqs:GetQueueUrl",
                    "ecs:GetTaskProtection", "ecs:UpdateTaskProtection",
                    "cloudwatch:PutMetricData"},
    "flow_logs": {"logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"},
    "rds_monitoring": set(),  # AWS's AmazonRDSEnhancedMonitoringRole only
}
#: Actions that take no resource, so "*" is their only possible resource.
RESOURCELESS = {"ecr:GetAuthorizationToken", "sqs:ListQueues", "cloudwatch:PutMetricData"}


def clean(value: Any) -> Any:
    """python-hcl2's tree without its metadata: quoted strings unquoted, ``__*__`` keys gone."""
    if isinstance(value, dict):
        return {clean(key): clean(item) for key, item in value.items()
                if not (isinstance(key, str) and key.startswith("__"))}
    if isinstance(value, list):
        return [clean(item) for item in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def load(directory: Path) -> dict[str, Any]:
    """Every top-level block of the .tf files in ``directory``, merged by kind:
    ``{"resource": {type: {name: body}}, "data": ..., "variable": {name: body},
    "locals": {name: value}, "output": ..., "module": ...}``."""
    merged: dict[str, Any] = {"resource": {}, "data": {}, "variable": {}, "locals": {},
                              "output": {}, "module": {}}
    for path in sorted(directory.glob("*.tf")):
        with path.open() as tf_file:
            parsed = clean(hcl2.load(tf_file))
        for kind in ("resource", "data"):
            for block in parsed.get(kind, []):
                for type_name, named in block.items():
                    for name, body in named.items():
                        assert name not in merged[kind].setdefault(type_name, {}), (path, name)
                        merged[kind][type_name][name] = body
        for kind in ("variable", "output", "module"):
            for block in parsed.get(kind, []):
                merged[kind].update(block)
        for block in parsed.get("locals", []):
            merged["locals"].update(block)
    return merged


@pytest.fixture(scope="module")
def module() -> dict[str, Any]:
    return load(MODULE)


def blocks(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    found = body.get(name, [])
    return found if isinstance(found, list) else [found]


def policy_documents(module: dict[str, Any], reference: str) -> list[dict[str, Any]]:
    """The aws_iam_policy_document a ``${data.aws_iam_policy_document.NAME[0].json}`` names,
    with the documents it includes through source_policy_documents."""
    match = re.fullmatch(r"\$\{data\.aws_iam_policy_document\.(\w+)(\[0\])?\.json\}", reference)
    assert match, f"policy {reference!r} is not an aws_iam_policy_document"
    document = module["data"]["aws_iam_policy_document"][match[1]]
    included = [doc for source in document.get("source_policy_documents", [])
                for doc in policy_documents(module, source)]
    return [document, *included]


def role_statements(module: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    roles: dict[str, list[dict[str, Any]]] = {name: [] for name in
                                              module["resource"]["aws_iam_role"]}
    for attached in module["resource"]["aws_iam_role_policy"].values():
        role = re.fullmatch(r"\$\{aws_iam_role\.(\w+)(\[0\])?\.id\}", attached["role"])
        assert role, attached["role"]
        for document in policy_documents(module, attached["policy"]):
            roles[role[1]] += blocks(document, "statement")
    return roles


def test_every_role_may_call_only_what_its_service_calls(module: dict[str, Any]) -> None:
    statements = role_statements(module)
    assert set(statements) == set(ALLOWED_ACTIONS)
    for role, role_statement_list in statements.items():
        granted = {action for statement in role_statement_list
                   for action in statement["actions"]}
        assert granted <= ALLOWED_ACTIONS[role], (role, granted - ALLOWED_ACTIONS[role])
        assert granted == ALLOWED_ACTIONS[role], (role, ALLOWED_ACTIONS[role] - granted)
        for statement in role_statement_list:
            assert statement.get("effect", "Allow") == "Allow"
            assert not any("*" in action for action in statement["actions"]), statement
            if "*" in statement["resources"]:
                # only actions that take no resource get "*"
                assert set(statement["actions"]) <= RESOURCELESS, (role, statement)


def test_task_roles_reach_only_their_own_secret_queues_and_namespace(
        module: dict[str, Any]) -> None:
    statements = role_statements(module)
    for role in ("api_task", "worker_task"):
        by_action = {action: statement for statement in statements[role]
                     for action in statement["actions"]}
        assert by_action["secretsmanager:GetSecretValue"]["resources"] == [
            "${aws_secretsmanager_secret.toren.arn}"]
        decrypt = by_action["kms:Decrypt"]
        assert decrypt["resources"] == ["${aws_kms_key.toren.arn}"]
        assert blocks(decrypt, "condition")[0]["variable"] == "kms:ViaService"
    worker = {action: statement for statement in statements["worker_task"]
              for action in statement["actions"]}
    assert worker["sqs:ReceiveMessage"]["resources"] == "${local.all_queue_arns}"
    assert module["locals"]["all_queue_arns"] == (
        "${concat([for queue in aws_sqs_queue.agent : queue.arn], "
        "[for queue in aws_sqs_queue.dead_letters : queue.arn])}")
    # protection of the cluster's own tasks only
    assert worker["ecs:UpdateTaskProtection"]["resources"] == [
        "arn:${local.partition}:ecs:${local.region}:${local.account_id}:task/"
        "${aws_ecs_cluster.toren.name}/*"]
    metric = blocks(worker["cloudwatch:PutMetricData"], "condition")
    assert metric == [{"test": "StringEquals", "variable": "cloudwatch:namespace",
                       "values": ["${var.queue_depth_metric_namespace}"]}]
    # the API publishes no metric and works no queue
    assert not {"sqs:ReceiveMessage", "sqs:SendMessage", "cloudwatch:PutMetricData"} & {
        action for statement in statements["api_task"] for action in statement["actions"]}


def test_task_roles_trust_only_ecs_tasks_of_this_account(module: dict[str, Any]) -> None:
    assume = module["data"]["aws_iam_policy_document"]["ecs_tasks_assume"]
    statement = blocks(assume, "statement")[0]
    assert statement["principals"][0]["identifiers"] == ["ecs-tasks.amazonaws.com"]
    assert {condition["variable"] for condition in blocks(statement, "condition")} == {
        "aws:SourceArn", "aws:SourceAccount"}
    roles = module["resource"]["aws_iam_role"]
    for name in ("execution", "api_task", "worker_task"):
        assert roles[name]["assume_role_policy"] == (
            "${data.aws_iam_policy_document.ecs_tasks_assume.json}")
    # one managed policy in the whole module, on the RDS monitoring role
    attachments = module["resource"]["aws_iam_role_policy_attachment"]
    assert [body["role"] for body in attachments.values()] == [
        "${aws_iam_role.rds_monitoring.name}"]


def test_the_database_is_encrypted_private_backed_up_and_refuses_plain_text(
        module: dict[str, Any]) -> None:
    database = module["resource"]["aws_db_instance"]["toren"]
    assert database["storage_encrypted"] is True
    assert database["kms_key_id"] == "${aws_kms_key.toren.arn}"
    assert database["publicly_accessible"] is False
    assert database["deletion_protection"] == "${var.db_deletion_protection}"
    assert module["variable"]["db_deletion_protection"]["default"] is True
    assert database["backup_retention_period"] == "${var.db_backup_retention_days}"
    assert module["variable"]["db_backup_retention_days"]["default"] >= 7
    assert database["skip_final_snapshot"] is False
    assert database["parameter_group_name"] == "${aws_db_parameter_group.toren.name}"
    parameters = {parameter["name"]: parameter["value"] for parameter in
                  module["resource"]["aws_db_parameter_group"]["toren"]["parameter"]}
    assert parameters["rds.force_ssl"] == "1"
    assert parameters["ssl_min_protocol_version"] == "TLSv1.2"


def test_database_url_verifies_the_server_against_the_rds_ca_bundle(
        module: dict[str, Any]) -> None:
    url = module["locals"]["database_url"]
    assert "sslmode=verify-full&sslrootcert=%s" in url
    assert "urlencode(var.db_ca_bundle_path)" in url
    image = (MODULE / "image" / "Dockerfile").read_text()
    bundle = module["variable"]["db_ca_bundle_path"]["default"]
    assert f"rds-global-bundle.pem {bundle}\n" in image
    # the tasks get the URL only through the secret, never as plain environment
    secret = module["resource"]["aws_secretsmanager_secret_version"]["toren"]
    assert "DATABASE_URL = local.database_url" in secret["secret_string"]
    assert module["resource"]["aws_secretsmanager_secret"]["toren"]["kms_key_id"] == (
        "${aws_kms_key.toren.arn}")
    assert "DATABASE_URL" not in module["locals"]["common_environment"]


def test_workers_drain_within_the_stop_timeout(module: dict[str, Any]) -> None:
    variables, locals_ = module["variable"], module["locals"]
    assert locals_["stop_timeout_seconds"] == (
        "${var.shutdown_grace_seconds + var.stop_timeout_margin_seconds}")
    grace, margin = (variables["shutdown_grace_seconds"], variables["stop_timeout_margin_seconds"])
    assert grace["default"] == Settings().shutdown_grace_s
    # the validations keep grace + margin within ECS's 120 s
    # toren-fargate's STOP_MARGIN_S is 8: the runtime refuses to start with less
    assert ">= 10" in margin["validation"][0]["condition"]
    assert "TOREN_FARGATE_STOP_TIMEOUT = tostring(local.stop_timeout_seconds)" in (
        locals_["worker_environment"])
    largest = [re.search(r"<= (\d+)", variable["validation"][0]["condition"])
               for variable in (grace, margin)]
    assert all(largest), largest
    assert sum(int(match[1]) for match in largest if match) <= 120
    for container in (locals_["worker_container"], locals_["api_container"]):
        assert container["stopTimeout"] == "${local.stop_timeout_seconds}"
        assert container["healthCheck"]["command"][0] == "CMD"
        assert container["readonlyRootFilesystem"] is True
    assert locals_["common_environment"]["TOREN_SHUTDOWN_GRACE"] == (
        "${tostring(var.shutdown_grace_seconds)}")
    # the load balancer keeps a stopping API task's requests for as long
    target_group = module["resource"]["aws_lb_target_group"]["api"]
    assert target_group["deregistration_delay"] == "${local.stop_timeout_seconds}"


def test_the_services_run_the_sqs_queue_and_the_fargate_runtime(module: dict[str, Any]) -> None:
    locals_ = module["locals"]
    # one worker process per vCPU of the task unless worker_processes says (a supervisor)
    assert locals_["worker_container"]["command"] == [
        "worker", "--processes", "${tostring(local.worker_processes)}"]
    assert locals_["worker_processes"] == (
        "${coalesce(var.worker_processes, max(1, ceil(var.worker_cpu / 1024)))}")
    assert locals_["worker_long_processes"] == (
        "${coalesce(var.worker_processes, max(1, ceil(var.worker_long_cpu / 1024)))}")
    assert locals_["api_container"]["command"] == ["serve"]
    common = locals_["common_environment"]
    assert common["TOREN_QUEUE"] == "sqs"
    assert common["TOREN_SQS_CREATE_QUEUES"] == "0"  # Terraform owns the queues
    assert common["TOREN_SECRETS"] == "${aws_secretsmanager_secret.toren.arn}"
    # the module's settings are merged last: var.environment cannot override them
    assert locals_["worker_environment"].startswith(
        "${merge(var.environment, local.common_environment, {TOREN_RUNTIME = \"fargate\"")
    assert locals_["api_environment"].startswith(
        "${merge(var.environment, local.common_environment,")
    services = module["resource"]["aws_ecs_service"]
    for service in services.values():
        network = service["network_configuration"][0]
        assert network["assign_public_ip"] is False
        assert network["subnets"] == "${local.private_subnet_ids}"
    assert services["worker"]["lifecycle"][0]["ignore_changes"] == ["desired_count"]


def test_the_queues_are_the_ones_toren_sqs_looks_for(module: dict[str, Any]) -> None:
    variables, locals_ = module["variable"], module["locals"]
    settings = SqsSettings(prefix=variables["sqs_prefix"]["default"])
    assert settings == SqsSettings()  # the same default prefix as the driver
    for agent in ("research-crew", "planner-crew"):
        rendered = {key: locals_[key].replace("${var.sqs_prefix}", settings.prefix)
                    .replace("${agent}", agent) for key in ("queue_names", "dead_letter_names")}
        assert rendered["queue_names"] == (
            f"${{{{for agent in var.agents : agent => \"{settings.queue_name(agent)}\"}}}}")
        assert rendered["dead_letter_names"] == (
            f"${{{{for agent in var.agents : agent => "
            f"\"{settings.queue_name(agent, dead_letters=True)}\"}}}}")
    assert variables["max_deliveries"]["default"] == Settings().max_deliveries
    assert locals_["redrive_max_receives"] == f"${{var.max_deliveries + {REDRIVE_MARGIN}}}"
    queue = module["resource"]["aws_sqs_queue"]["agent"]
    assert "maxReceiveCount = local.redrive_max_receives" in queue["redrive_policy"]
    assert queue["sqs_managed_sse_enabled"] is True
    assert locals_["message_retention_s"] == "${14 * 24 * 3600}"  # as the driver creates them


def test_autoscaling_follows_the_published_queue_depth(module: dict[str, Any]) -> None:
    variables = module["variable"]
    assert variables["queue_depth_metric_namespace"]["default"] == "Toren"
    assert variables["queue_depth_metric_name"]["default"] == "QueueDepth"
    assert module["locals"]["queue_depth_fleet"] == "${coalesce(var.queue_depth_fleet, var.name)}"
    policy = module["resource"]["aws_appautoscaling_policy"]["worker_backlog"]
    tracking = policy["target_tracking_scaling_policy_configuration"][0]
    metrics = {metric["id"]: metric for metric in
               tracking["customized_metric_specification"][0]["metrics"]}
    depth = metrics["depth"]["metric_stat"][0]["metric"][0]
    assert depth["namespace"] == "${var.queue_depth_metric_namespace}"
    assert depth["metric_name"] == "${var.queue_depth_metric_name}"
    assert depth["dimensions"] == [{"name": "Fleet", "value": "${local.queue_depth_fleet}"}]
    # the workers publish in the namespace and under the fleet the policy reads
    worker = module["locals"]["worker_environment"]
    assert "TOREN_FARGATE_METRIC_NAMESPACE = var.queue_depth_metric_namespace" in worker
    assert "TOREN_FARGATE_FLEET = local.queue_depth_fleet" in worker
    assert metrics["backlog_per_task"]["expression"] == "depth / tasks"
    assert metrics["backlog_per_task"]["return_data"] is True


def test_https_only_with_tls_1_2_or_later(module: dict[str, Any]) -> None:
    listeners = module["resource"]["aws_lb_listener"]
    assert listeners["https"]["protocol"] == "HTTPS"
    assert listeners["https"]["ssl_policy"].startswith("ELBSecurityPolicy-TLS13-1-2")
    redirect = listeners["http_redirect"]["default_action"][0]
    assert redirect["type"] == "redirect"
    assert redirect["redirect"][0]["protocol"] == "HTTPS"
    distribution = module["resource"]["aws_cloudfront_distribution"]["toren"]
    behaviour = distribution["default_cache_behavior"][0]
    assert behaviour["viewer_protocol_policy"] == "redirect-to-https"
    assert distribution["viewer_certificate"][0]["minimum_protocol_version"] == "TLSv1.2_2021"
    origin = distribution["origin"][0]["custom_origin_config"][0]
    assert origin["origin_protocol_policy"] == "https-only"
    assert origin["origin_ssl_protocols"] == ["TLSv1.2"]
    # the load balancer is reachable from CloudFront's addresses only
    ingress = module["resource"]["aws_vpc_security_group_ingress_rule"]["alb_from_cloudfront"]
    assert ingress["prefix_list_id"] == "${data.aws_ec2_managed_prefix_list.cloudfront.id}"


def test_logs_are_encrypted_and_expire(module: dict[str, Any]) -> None:
    groups = module["resource"]["aws_cloudwatch_log_group"]
    assert set(groups) == {"api", "worker", "database", "flow"}
    for group in groups.values():
        assert group["kms_key_id"] == "${aws_kms_key.toren.arn}"
        assert group["retention_in_days"] == "${var.log_retention_days}"


def test_every_input_and_output_is_described_and_every_reference_resolves(
        module: dict[str, Any]) -> None:
    for kind in ("variable", "output"):
        for name, body in module[kind].items():
            assert len(body.get("description", "")) > 10, f"{kind} {name} has no description"
    for name, body in module["variable"].items():
        assert "type" in body, f"variable {name} has no type"
    text = "\n".join(path.read_text() for path in MODULE.glob("*.tf"))
    text = re.sub(r"#.*", "", text)  # comments may name anything
    for name in set(re.findall(r"\bvar\.(\w+)", text)):
        assert name in module["variable"], f"var.{name} is not declared"
    for name in set(re.findall(r"\blocal\.(\w+)", text)):
        assert name in module["locals"], f"local.{name} is not defined"
    for type_name, name in set(re.findall(r"(?<![.\w])(aws_\w+|random_\w+)\.(\w+)", text)):
        assert name in module["resource"].get(type_name, {}), f"{type_name}.{name} is missing"
    for type_name, name in set(re.findall(r"\bdata\.(\w+)\.(\w+)", text)):
        assert name in module["data"].get(type_name, {}), f"data.{type_name}.{name} is missing"


def test_every_checkov_waiver_gives_its_reason() -> None:
    waivers = [(path.name, line) for path in [*MODULE.rglob("*.tf"), MODULE / "image" /
                                              "Dockerfile"]
               for line in path.read_text().splitlines() if "checkov:skip" in line]
    assert waivers, "no waivers found: has the syntax changed?"
    for path_name, line in waivers:
        match = re.search(r"#checkov:skip=(CKV2?_[A-Z]+_\d+):(.+)$", line)
        assert match, (path_name, line)
        assert len(match[2].split()) >= 8, f"{path_name}: {match[1]} needs a real reason"


def test_the_example_uses_the_module_with_agents_that_exist() -> None:
    example = load(EXAMPLE)
    call = example["module"]["toren"]
    assert call["source"] == "../.."
    # CloudFront's certificate and web ACL need the us-east-1 provider passed in
    assert "${aws.us_east_1}" in call["providers"].values()
    # the image bakes in contrib/examples (TOREN_DIRS=/agents): each agent it serves needs
    # its queues, or the workers stop at startup (TOREN_SQS_CREATE_QUEUES=0)
    served = {load_agent(path).name for path in
              discover_agent_dirs([ROOT / "contrib" / "examples"])}
    assert sorted(call["agents"]) == sorted(served)
    required = {name for name, body in load(MODULE)["variable"].items() if "default" not in body}
    assert required <= set(call), required - set(call)


def validation_regex(module: dict[str, Any], variable: str) -> re.Pattern[str]:
    condition = module["variable"][variable]["validation"][0]["condition"]
    found = re.search(r'regex\("(.+?)", ', condition)
    assert found, condition
    # HCL string escapes: \\ is one backslash
    return re.compile(found[1].replace("\\\\", "\\"))


@pytest.mark.parametrize("prefix, accepted", [
    ("toren-", True), ("", True), ("prod_eu-", True), ("x" * 60, True),
    ("x" * 61, False), ("toren prefix", False), ("toren.", False), ("tören-", False),
    ("toren-\n", False)])
def test_sqs_prefix_validation_accepts_what_toren_sqs_accepts(
        module: dict[str, Any], prefix: str, accepted: bool) -> None:
    """A prefix Terraform lets through must not stop the workers at startup, and the reverse."""
    assert bool(validation_regex(module, "sqs_prefix").fullmatch(prefix)) is accepted
    try:
        SqsSettings.from_env({"TOREN_SQS_PREFIX": prefix})
        driver_accepts = True
    except ConfigError:
        driver_accepts = False
    assert driver_accepts is accepted


@pytest.mark.parametrize("agent, accepted", [
    ("research-crew", True), ("a_b", True), ("", False), ("research crew", False),
    ("crew/../x", False), ("crew.1", False)])
def test_agent_names_validation_matches_sqs_queue_names(
        module: dict[str, Any], agent: str, accepted: bool) -> None:
    assert bool(validation_regex(module, "agents").fullmatch(agent)) is accepted
    if accepted:  # and the queue toren-sqs derives from it is one SQS takes
        SqsSettings().queue_name(agent, dead_letters=True)


@pytest.mark.parametrize("tag, accepted", [
    ("0.1.0", True), ("v0.2.0-rc.1", True), ("latest", False), ("", False), ("-x", False),
    ("a" * 129, False), ("0.1.0 ", False), ("repo:tag", False)])
def test_image_tag_validation_refuses_moving_and_malformed_tags(
        module: dict[str, Any], tag: str, accepted: bool) -> None:
    matches = bool(validation_regex(module, "image_tag").fullmatch(tag))
    assert (matches and tag != "latest") is accepted


def test_the_long_lane_is_a_service_of_its_own_scaling_on_its_own_queues(
        module: dict[str, Any]) -> None:
    variables, locals_ = module["variable"], module["locals"]
    resources = module["resource"]
    # off by default: one worker service serves every agent, as before lanes
    assert variables["long_lane_enabled"]["default"] is False
    assert 'TOREN_LANE = var.long_lane_enabled ? "short" : "all"' in locals_[
        "worker_environment"]
    for kind, name in (("aws_ecs_task_definition", "worker_long"),
                       ("aws_ecs_service", "worker_long"),
                       ("aws_appautoscaling_target", "worker_long"),
                       ("aws_appautoscaling_policy", "worker_long_backlog")):
        assert resources[kind][name]["count"] == "${var.long_lane_enabled ? 1 : 0}", name
    # its own size, concurrency, metric fleet and protection bound (TOREN_* the worker reads)
    long_env = locals_["worker_long_environment"]
    assert long_env.startswith("${merge(local.worker_environment, {")
    for setting in ('TOREN_LANE = "long"',
                    "TOREN_CONCURRENCY = tostring(var.worker_long_concurrency)",
                    "TOREN_FARGATE_FLEET = local.queue_depth_fleet_long",
                    "TOREN_FARGATE_PROTECTION_MINUTES = "
                    "tostring(var.worker_long_protection_minutes)"):
        assert setting in long_env, setting
    task = resources["aws_ecs_task_definition"]["worker_long"]
    assert (task["cpu"], task["memory"]) == ("${var.worker_long_cpu}",
                                             "${var.worker_long_memory}")
    assert task["container_definitions"] == "${jsonencode([local.worker_long_container])}"
    assert locals_["worker_long_container"].startswith("${merge(local.worker_container, {")
    service = resources["aws_ecs_service"]["worker_long"]
    assert service["lifecycle"][0]["ignore_changes"] == ["desired_count"]
    assert service["network_configuration"][0]["security_groups"] == [
        "${aws_security_group.worker.id}"]
    # it scales on the depth its own tasks publish (the long agents' queues), not the others'
    policy = resources["aws_appautoscaling_policy"]["worker_long_backlog"]
    tracking = policy["target_tracking_scaling_policy_configuration"][0]
    metrics = {metric["id"]: metric for metric in
               tracking["customized_metric_specification"][0]["metrics"]}
    depth = metrics["depth"]["metric_stat"][0]["metric"][0]
    assert depth["dimensions"] == [{"name": "Fleet", "value": "${local.queue_depth_fleet_long}"}]
    tasks = metrics["tasks"]["metric_stat"][0]["metric"][0]["dimensions"]
    assert {"name": "ServiceName", "value": "${aws_ecs_service.worker_long[0].name}"} in tasks
    assert locals_["queue_depth_fleet_long"] == "${local.queue_depth_fleet}-long"
    # the settings the long service gets are ones the worker accepts
    assert Settings.from_env({"TOREN_LANE": "long"}).lane == "long"
    assert variables["worker_long_protection_minutes"]["default"] <= 2880
