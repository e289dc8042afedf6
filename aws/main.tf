# Values the other files share: names, the network in use, the image, the settings every task
# gets, and the stop timeout derived from the shutdown grace.

data "aws_region" "current" {}
data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

# With vpc_id: the given public subnets, for their CIDR blocks (the load balancer's addresses).
data "aws_subnet" "given_public" {
  count = var.vpc_id == null ? 0 : length(var.public_subnet_ids)
  id    = var.public_subnet_ids[count.index]
}

locals {
  region     = data.aws_region.current.name
  account_id = data.aws_caller_identity.current.account_id
  partition  = data.aws_partition.current.partition

  tags = merge({ "toren:deployment" = var.name }, var.tags)

  create_vpc         = var.vpc_id == null
  vpc_id             = local.create_vpc ? aws_vpc.this[0].id : var.vpc_id
  public_subnet_ids  = local.create_vpc ? aws_subnet.public[*].id : var.public_subnet_ids
  private_subnet_ids = local.create_vpc ? aws_subnet.private[*].id : var.private_subnet_ids
  # where the load balancer's nodes are: the API believes X-Forwarded-For from these only
  public_subnet_cidrs = (local.create_vpc ? aws_subnet.public[*].cidr_block
  : data.aws_subnet.given_public[*].cidr_block)

  origin_domain_name = coalesce(var.origin_domain_name, "origin.${var.domain_name}")
  image              = "${coalesce(var.image, aws_ecr_repository.toren.repository_url)}:${var.image_tag}"

  # ECS SIGKILLs a container stopTimeout seconds after SIGTERM: the grace Toren gives work in
  # hand, plus a margin to hand the rest back and exit (at most 120 s on Fargate).
  stop_timeout_seconds = var.shutdown_grace_seconds + var.stop_timeout_margin_seconds

  queue_depth_fleet = coalesce(var.queue_depth_fleet, var.name)
  # the long lane's service scales on its own agents' queues, under a Fleet of its own
  queue_depth_fleet_long = "${local.queue_depth_fleet}-long"

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
    # the audit trail records the client the load balancer saw, not the load balancer
    TOREN_TRUSTED_PROXIES = join(",", local.public_subnet_cidrs)
  })
  worker_environment = merge(var.environment, local.common_environment, {
    TOREN_RUNTIME                  = "fargate"
    TOREN_CONCURRENCY              = tostring(var.worker_concurrency)
    TOREN_FARGATE_STOP_TIMEOUT     = tostring(local.stop_timeout_seconds)
    TOREN_FARGATE_HEALTH_PORT      = tostring(var.worker_health_port)
    TOREN_FARGATE_METRIC_NAMESPACE = var.queue_depth_metric_namespace
    TOREN_FARGATE_FLEET            = local.queue_depth_fleet
    # one pool for every agent, or the short lane when worker-long serves the long one
    TOREN_LANE = var.long_lane_enabled ? "short" : "all"
  })
  # worker processes per task (toren worker --processes): one per vCPU unless set
  worker_processes      = coalesce(var.worker_processes, max(1, ceil(var.worker_cpu / 1024)))
  worker_long_processes = coalesce(var.worker_processes, max(1, ceil(var.worker_long_cpu / 1024)))
  worker_long_environment = merge(local.worker_environment, {
    TOREN_LANE                       = "long"
    TOREN_CONCURRENCY                = tostring(var.worker_long_concurrency)
    TOREN_FARGATE_FLEET              = local.queue_depth_fleet_long
    TOREN_FARGATE_PROTECTION_MINUTES = tostring(var.worker_long_protection_minutes)
  })
}
