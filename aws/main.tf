# Values the other files share: names, the network in use, the image, the settings every task
# gets, and the stop timeout derived from the shutdown grace.

data "aws_region" "current" {}
data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

locals {
  region     = data.aws_region.current.name
  account_id = data.aws_caller_identity.current.account_id
  partition  = data.aws_partition.current.partition

  tags = merge({ "toren:deployment" = var.name }, var.tags)

  create_vpc         = var.vpc_id == null
  vpc_id             = local.create_vpc ? aws_vpc.this[0].id : var.vpc_id
  public_subnet_ids  = local.create_vpc ? aws_subnet.public[*].id : var.public_subnet_ids
  private_subnet_ids = local.create_vpc ? aws_subnet.private[*].id : var.private_subnet_ids

  origin_domain_name = coalesce(var.origin_domain_name, "origin.${var.domain_name}")
  image              = "${coalesce(var.image, aws_ecr_repository.toren.repository_url)}:${var.image_tag}"

  # ECS SIGKILLs a container stopTimeout seconds after SIGTERM: the grace Toren gives work in
  # hand, plus a margin to hand the rest back and exit (at most 120 s on Fargate).
  stop_timeout_seconds = var.shutdown_grace_seconds + var.stop_timeout_margin_seconds

  queue_depth_fleet = coalesce(var.queue_depth_fleet, var.name)

  # Settings of every Toren process here; the user's var.environment comes first so these win.
  common_environment = {
    AWS_REGION              = local.region
    TOREN_QUEUE             = "sqs"
    TOREN_SQS_PREFIX        = var.sqs_prefix
    TOREN_SQS_CREATE_QUEUES = "0"
    TOREN_MAX_DELIVERIES    = tostring(var.max_deliveries)
    TOREN_SHUTDOWN_GRACE    = tostring(var.shutdown_grace_seconds)
    TOREN_SECRETS           = aws_secretsmanager_secret.toren.arn
    TOREN_DIRS              = "/agents"
    PYTHONDONTWRITEBYTECODE = "1"
  }
  api_environment = merge(var.environment, local.common_environment, {
    TOREN_HOST = "0.0.0.0"
    TOREN_PORT = "8420"
  })
  worker_environment = merge(var.environment, local.common_environment, {
    TOREN_RUNTIME                  = "fargate"
    TOREN_CONCURRENCY              = tostring(var.worker_concurrency)
    TOREN_FARGATE_STOP_TIMEOUT     = tostring(local.stop_timeout_seconds)
    TOREN_FARGATE_HEALTH_PORT      = tostring(var.worker_health_port)
    TOREN_FARGATE_METRIC_NAMESPACE = var.queue_depth_metric_namespace
    TOREN_FARGATE_FLEET            = local.queue_depth_fleet
  })
}
