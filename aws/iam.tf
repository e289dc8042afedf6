# IAM, least privilege: each role may call only what its service calls.
#   execution role  pulls the image and writes the containers' logs (ECS itself uses it)
#   api task role   toren serve: reads its secret; opens the SQS driver (ListQueues check)
#   worker task role toren worker: its secret, its queues, the queue depth metric, and its own
#                    scale-in protection. The fargate runtime sets protection through the ECS
#                    agent endpoint inside the task ($ECS_AGENT_URI/task-protection/v1/state),
#                    but the agent calls ecs:UpdateTaskProtection (and GetTaskProtection) with the
#                    task role's credentials, so the task role needs them.

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${local.partition}:ecs:${local.region}:${local.account_id}:*"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

# -- execution role ----------------------------------------------------------------------------------

resource "aws_iam_role" "execution" {
  name               = "${var.name}-toren-execution"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = local.tags
}

data "aws_iam_policy_document" "execution" {
  statement {
    sid       = "RegistryLogin"
    actions   = ["ecr:GetAuthorizationToken"]
    resources = ["*"] # GetAuthorizationToken takes no resource
  }
  statement {
    sid       = "PullTheImage"
    actions   = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
    resources = [aws_ecr_repository.toren.arn]
  }
  statement {
    sid       = "ContainerLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.api.arn}:*", "${aws_cloudwatch_log_group.worker.arn}:*"]
  }
}

resource "aws_iam_role_policy" "execution" {
  name   = "pull-and-log"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution.json
}

# -- what both task roles need: the secret ------------------------------------------------------------

data "aws_iam_policy_document" "read_secret" {
  statement {
    sid       = "ReadTheSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.toren.arn]
  }
  statement {
    sid       = "DecryptTheSecret"
    actions   = ["kms:Decrypt"]
    resources = [aws_kms_key.toren.arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${local.region}.amazonaws.com"]
    }
  }
}

# -- api task role --------------------------------------------------------------------------------------

resource "aws_iam_role" "api_task" {
  name               = "${var.name}-toren-api"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = local.tags
}

data "aws_iam_policy_document" "api_task" {
  source_policy_documents = [data.aws_iam_policy_document.read_secret.json]

  statement {
    sid       = "QueueDriverStartupCheck"
    actions   = ["sqs:ListQueues"]
    resources = ["*"] # ListQueues takes no resource
  }
}

resource "aws_iam_role_policy" "api_task" {
  name   = "toren-serve"
  role   = aws_iam_role.api_task.id
  policy = data.aws_iam_policy_document.api_task.json
}

# -- worker task role -------------------------------------------------------------------------------------

resource "aws_iam_role" "worker_task" {
  name               = "${var.name}-toren-worker"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = local.tags
}

data "aws_iam_policy_document" "worker_task" {
  source_policy_documents = [data.aws_iam_policy_document.read_secret.json]

  statement {
    sid       = "QueueDriverStartupCheck"
    actions   = ["sqs:ListQueues"]
    resources = ["*"] # ListQueues takes no resource
  }
  statement {
    sid = "WorkTheAgentsQueues"
    actions = [
      "sqs:ChangeMessageVisibility",
      "sqs:DeleteMessage",
      "sqs:GetQueueAttributes",
      "sqs:GetQueueUrl",
      "sqs:ReceiveMessage",
      "sqs:SendMessage",
    ]
    resources = local.all_queue_arns
  }
  statement {
    sid       = "ProtectItselfFromScaleIn"
    actions   = ["ecs:GetTaskProtection", "ecs:UpdateTaskProtection"]
    resources = ["arn:${local.partition}:ecs:${local.region}:${local.account_id}:task/${aws_ecs_cluster.toren.name}/*"]
  }
  statement {
    sid       = "PublishQueueDepth"
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"] # PutMetricData takes no resource; the namespace condition bounds it
    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [var.queue_depth_metric_namespace]
    }
  }
}

resource "aws_iam_role_policy" "worker_task" {
  name   = "toren-worker"
  role   = aws_iam_role.worker_task.id
  policy = data.aws_iam_policy_document.worker_task.json
}

# -- VPC flow logs ----------------------------------------------------------------------------------------

data "aws_iam_policy_document" "flow_logs_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["vpc-flow-logs.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

resource "aws_iam_role" "flow_logs" {
  count = local.create_vpc ? 1 : 0

  name               = "${var.name}-toren-flow-logs"
  assume_role_policy = data.aws_iam_policy_document.flow_logs_assume.json
  tags               = local.tags
}

data "aws_iam_policy_document" "flow_logs" {
  count = local.create_vpc ? 1 : 0

  statement {
    sid       = "WriteFlowLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = ["${aws_cloudwatch_log_group.flow[0].arn}:*"]
  }
}

resource "aws_iam_role_policy" "flow_logs" {
  count = local.create_vpc ? 1 : 0

  name   = "write-flow-logs"
  role   = aws_iam_role.flow_logs[0].id
  policy = data.aws_iam_policy_document.flow_logs[0].json
}

# -- RDS enhanced monitoring ------------------------------------------------------------------------------

data "aws_iam_policy_document" "rds_monitoring_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["monitoring.rds.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "rds_monitoring" {
  name               = "${var.name}-toren-rds-monitoring"
  assume_role_policy = data.aws_iam_policy_document.rds_monitoring_assume.json
  tags               = local.tags
}

# AWS's own policy for this service role: it writes the OS metrics to the RDSOSMetrics log group.
resource "aws_iam_role_policy_attachment" "rds_monitoring" {
  role       = aws_iam_role.rds_monitoring.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/service-role/AmazonRDSEnhancedMonitoringRole"
}
