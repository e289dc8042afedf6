# Inputs of the Toren module. Only name, domain_name, image_tag and agents are required;
# the rest have defaults sized for a small production deployment.

# -- naming and DNS ----------------------------------------------------------------------------

variable "name" {
  description = "Name of this deployment: prefixes every resource (cluster, database, roles, log groups)."
  type        = string
  default     = "toren"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,19}$", var.name))
    error_message = "name must be 2-20 characters: lowercase letters, digits and '-', starting with a letter (it becomes part of RDS, ALB and IAM names)."
  }
}

variable "domain_name" {
  description = "Public host name of the API, served by CloudFront (e.g. toren.example.com)."
  type        = string

  validation {
    condition     = can(regex("^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)+[a-z]{2,63}$", var.domain_name))
    error_message = "domain_name must be a lowercase DNS name such as toren.example.com."
  }
}

variable "origin_domain_name" {
  description = "Host name CloudFront uses to reach the load balancer (null: origin.<domain_name>). The ALB certificate must cover it."
  type        = string
  default     = null

  validation {
    condition     = var.origin_domain_name == null || can(regex("^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)+[a-z]{2,63}$", var.origin_domain_name))
    error_message = "origin_domain_name must be null or a lowercase DNS name such as origin.toren.example.com."
  }
}

variable "route53_zone_id" {
  description = "Route 53 public hosted zone of domain_name. When set, the module issues and validates both ACM certificates and creates the DNS records; when null, pass alb_certificate_arn and cloudfront_certificate_arn and create the records yourself (see the outputs)."
  type        = string
  default     = null
}

variable "alb_certificate_arn" {
  description = "Issued ACM certificate in the deployment's region covering origin_domain_name; used only when route53_zone_id is null."
  type        = string
  default     = null

  validation {
    condition     = var.alb_certificate_arn == null || can(regex("^arn:aws[a-z-]*:acm:[a-z0-9-]+:[0-9]{12}:certificate/", var.alb_certificate_arn))
    error_message = "alb_certificate_arn must be null or an ACM certificate ARN (arn:aws:acm:REGION:ACCOUNT:certificate/...)."
  }
}

variable "cloudfront_certificate_arn" {
  description = "Issued ACM certificate in us-east-1 covering domain_name (CloudFront only reads certificates from us-east-1); used only when route53_zone_id is null."
  type        = string
  default     = null

  validation {
    condition     = var.cloudfront_certificate_arn == null || can(regex("^arn:aws[a-z-]*:acm:us-east-1:[0-9]{12}:certificate/", var.cloudfront_certificate_arn))
    error_message = "cloudfront_certificate_arn must be null or an ACM certificate ARN in us-east-1."
  }
}

# -- network -------------------------------------------------------------------------------------

variable "vpc_id" {
  description = "Bring your own VPC: its id (then set public_subnet_ids and private_subnet_ids). null: the module creates a VPC."
  type        = string
  default     = null
}

variable "public_subnet_ids" {
  description = "With vpc_id: at least two public subnets (in different AZs) for the load balancer."
  type        = list(string)
  default     = []
}

variable "private_subnet_ids" {
  description = "With vpc_id: at least two private subnets (in different AZs, with a route to the internet through NAT) for the tasks and the database."
  type        = list(string)
  default     = []
}

variable "vpc_cidr" {
  description = "CIDR block of the VPC the module creates (ignored with vpc_id)."
  type        = string
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 20
    error_message = "vpc_cidr must be an IPv4 CIDR block of /20 or larger (e.g. 10.40.0.0/16)."
  }
}

variable "availability_zone_count" {
  description = "Availability zones the created VPC spans (2 or 3)."
  type        = number
  default     = 2

  validation {
    condition     = contains([2, 3], var.availability_zone_count)
    error_message = "availability_zone_count must be 2 or 3."
  }
}

variable "nat_gateway_per_az" {
  description = "One NAT gateway per availability zone (survives an AZ outage, about 33 USD/month each) instead of one shared."
  type        = bool
  default     = false
}

# -- image and agents ----------------------------------------------------------------------------

variable "image" {
  description = "Full image reference to run, without the tag (registry/repository). null: the ECR repository this module creates. The execution role may pull only from that repository: for another private ECR repository, add its ARN to the PullTheImage statement in iam.tf."
  type        = string
  default     = null
}

variable "image_tag" {
  description = "Image tag to run: Toren's exact version or a release tag, never a moving tag such as latest. Changing it rolls both services."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", var.image_tag)) && var.image_tag != "latest"
    error_message = "image_tag must be a valid, immutable Docker tag (letters, digits, '_', '.', '-'), not latest."
  }
}

variable "agents" {
  description = "Names of the agents the image serves (the name: in each agent.yaml). Each gets an SQS queue <sqs_prefix><agent> and a dead-letter queue <sqs_prefix><agent>-dlq."
  type        = list(string)

  validation {
    condition     = length(var.agents) > 0 && alltrue([for agent in var.agents : can(regex("^[A-Za-z0-9_-]+$", agent))])
    error_message = "agents must list at least one agent name; names are letters, digits, '-' and '_'."
  }
}

variable "sqs_prefix" {
  description = "TOREN_SQS_PREFIX: queue names are <prefix><agent> and <prefix><agent>-dlq. One prefix per deployment sharing an account and region."
  type        = string
  default     = "toren-"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{0,60}$", var.sqs_prefix))
    error_message = "sqs_prefix must be at most 60 letters, digits, '-' or '_' (toren-sqs refuses anything else)."
  }
}

variable "max_deliveries" {
  description = "TOREN_MAX_DELIVERIES: deliveries of one message before Toren dead-letters it and fails its run. The queues' redrive policy backstops at this + 5 receives, as toren-sqs does."
  type        = number
  default     = 5

  validation {
    condition     = var.max_deliveries >= 1 && var.max_deliveries <= 100 && floor(var.max_deliveries) == var.max_deliveries
    error_message = "max_deliveries must be a whole number from 1 to 100."
  }
}

variable "environment" {
  description = "Extra environment of both services (TOREN_* settings such as TOREN_LOG_LEVEL). Never put secrets here: use secret_values. The queue, runtime and secret settings the module sets win over these."
  type        = map(string)
  default     = {}
}

variable "secret_values" {
  description = "Secrets the tasks read through TOREN_SECRETS, e.g. { ANTHROPIC_API_KEY = \"...\" }. Stored in the Secrets Manager secret together with the DATABASE_URL the module builds (and in Terraform state: keep state encrypted)."
  type        = map(string)
  default     = {}
  sensitive   = true

  validation {
    condition     = !contains(keys(var.secret_values), "DATABASE_URL")
    error_message = "secret_values must not set DATABASE_URL: the module builds it from the RDS instance."
  }
}

# -- services ------------------------------------------------------------------------------------

variable "api_cpu" {
  description = "CPU units of one API task (256 = 0.25 vCPU)."
  type        = number
  default     = 256

  validation {
    condition     = contains([256, 512, 1024, 2048, 4096], var.api_cpu)
    error_message = "api_cpu must be a Fargate CPU size: 256, 512, 1024, 2048 or 4096."
  }
}

variable "api_memory" {
  description = "Memory (MiB) of one API task; must be a Fargate-valid pairing with api_cpu."
  type        = number
  default     = 512

  validation {
    condition     = var.api_memory >= 512 && var.api_memory <= 30720
    error_message = "api_memory must be from 512 to 30720 MiB."
  }
}

variable "api_desired_count" {
  description = "API tasks (toren serve) behind the load balancer; two spread over two AZs survive the loss of one."
  type        = number
  default     = 2

  validation {
    condition     = var.api_desired_count >= 1 && var.api_desired_count <= 50
    error_message = "api_desired_count must be from 1 to 50."
  }
}

variable "worker_cpu" {
  description = "CPU units of one worker task (toren worker)."
  type        = number
  default     = 512

  validation {
    condition     = contains([256, 512, 1024, 2048, 4096], var.worker_cpu)
    error_message = "worker_cpu must be a Fargate CPU size: 256, 512, 1024, 2048 or 4096."
  }
}

variable "worker_memory" {
  description = "Memory (MiB) of one worker task; must be a Fargate-valid pairing with worker_cpu."
  type        = number
  default     = 1024

  validation {
    condition     = var.worker_memory >= 512 && var.worker_memory <= 30720
    error_message = "worker_memory must be from 512 to 30720 MiB."
  }
}

variable "worker_concurrency" {
  description = "TOREN_CONCURRENCY of each worker: queue messages one worker task works at once."
  type        = number
  default     = 8

  validation {
    condition     = var.worker_concurrency >= 1 && var.worker_concurrency <= 1000
    error_message = "worker_concurrency must be from 1 to 1000."
  }
}

variable "worker_processes" {
  description = "Worker processes in each worker task (toren worker --processes, under a supervisor that restarts one that dies and drains all on SIGTERM). Default (null): one per vCPU of the task, worker_cpu / 1024 rounded up (1 at the default 512), and worker_long_cpu / 1024 for the long lane's. Each process works worker_concurrency messages with its own TOREN_POOL_SIZE (10) database connections."
  type        = number
  default     = null
  nullable    = true

  validation {
    condition     = var.worker_processes == null ? true : (var.worker_processes >= 1 && var.worker_processes <= 16 && floor(var.worker_processes) == var.worker_processes)
    error_message = "worker_processes must be a whole number from 1 to 16, or null (one per vCPU of the task)."
  }
}

variable "worker_min_count" {
  description = "Fewest worker tasks autoscaling keeps (at least 1: the scaling metric is queue depth per running task)."
  type        = number
  default     = 1

  validation {
    condition     = var.worker_min_count >= 1
    error_message = "worker_min_count must be at least 1."
  }
}

variable "worker_max_count" {
  description = "Most worker tasks autoscaling starts. Each task opens up to TOREN_POOL_SIZE (10) database connections: keep (worker_max_count + api_desired_count) x 10 under the database's max_connections (about 80 usable on db.t4g.micro)."
  type        = number
  default     = 5

  validation {
    condition     = var.worker_max_count >= 1 && var.worker_max_count <= 200
    error_message = "worker_max_count must be from 1 to 200."
  }
}

variable "worker_target_backlog_per_task" {
  description = "Autoscaling target: queued messages per running worker task. Around worker_concurrency keeps every task busy without a long wait."
  type        = number
  default     = 8

  validation {
    condition     = var.worker_target_backlog_per_task > 0
    error_message = "worker_target_backlog_per_task must be greater than zero."
  }
}

variable "long_lane_enabled" {
  description = "Run a second worker service, worker-long, for the agents with runtime: long in agent.yaml (the long lane: hours-long sandbox or document runs), so they never hold the slots of the short runs. The worker service then serves the short lane (TOREN_LANE=short); without it, the one worker service serves every agent (TOREN_LANE=all). See docs/guides/deploy-aws.md, Long-running agents."
  type        = bool
  default     = false
}

variable "worker_long_cpu" {
  description = "CPU units of one worker-long task (long_lane_enabled)."
  type        = number
  default     = 1024

  validation {
    condition     = contains([256, 512, 1024, 2048, 4096, 8192, 16384], var.worker_long_cpu)
    error_message = "worker_long_cpu must be a Fargate CPU size: 256, 512, 1024, 2048, 4096, 8192 or 16384."
  }
}

variable "worker_long_memory" {
  description = "Memory (MiB) of one worker-long task; must be a Fargate-valid pairing with worker_long_cpu."
  type        = number
  default     = 4096

  validation {
    condition     = var.worker_long_memory >= 512 && var.worker_long_memory <= 122880
    error_message = "worker_long_memory must be from 512 to 122880 MiB."
  }
}

variable "worker_long_concurrency" {
  description = "TOREN_CONCURRENCY of each worker-long task: long runs one task works at once."
  type        = number
  default     = 4

  validation {
    condition     = var.worker_long_concurrency >= 1 && var.worker_long_concurrency <= 1000
    error_message = "worker_long_concurrency must be from 1 to 1000."
  }
}

variable "worker_long_min_count" {
  description = "Fewest worker-long tasks autoscaling keeps (at least 1: the scaling metric is queue depth per running task)."
  type        = number
  default     = 1

  validation {
    condition     = var.worker_long_min_count >= 1
    error_message = "worker_long_min_count must be at least 1."
  }
}

variable "worker_long_max_count" {
  description = "Most worker-long tasks autoscaling starts. Count their database connections with the others' (worker_max_count)."
  type        = number
  default     = 10

  validation {
    condition     = var.worker_long_max_count >= 1 && var.worker_long_max_count <= 200
    error_message = "worker_long_max_count must be from 1 to 200."
  }
}

variable "worker_long_target_backlog_per_task" {
  description = "Autoscaling target of worker-long: queued long-lane messages per running task."
  type        = number
  default     = 4

  validation {
    condition     = var.worker_long_target_backlog_per_task > 0
    error_message = "worker_long_target_backlog_per_task must be greater than zero."
  }
}

variable "worker_long_protection_minutes" {
  description = "TOREN_FARGATE_PROTECTION_MINUTES of worker-long: each scale-in protection it takes while busy expires after this unless renewed (it is, every few minutes, while a run is in hand), so it bounds only how long a hung task stays protected."
  type        = number
  default     = 120

  validation {
    condition     = var.worker_long_protection_minutes >= 1 && var.worker_long_protection_minutes <= 2880
    error_message = "worker_long_protection_minutes must be from 1 to 2880 (ECS's limit)."
  }
}

variable "worker_health_port" {
  description = "Port of the fargate runtime's health endpoint in the worker container (TOREN_FARGATE_HEALTH_PORT); the container health check asks http://127.0.0.1:<port>/healthz."
  type        = number
  default     = 8081

  validation {
    condition     = var.worker_health_port >= 1024 && var.worker_health_port <= 65535 && var.worker_health_port != 8420
    error_message = "worker_health_port must be an unprivileged port (1024-65535) other than the API's 8420."
  }
}

variable "shutdown_grace_seconds" {
  description = "TOREN_SHUTDOWN_GRACE: seconds a stopping task lets work in hand finish before handing the rest back."
  type        = number
  default     = 10

  validation {
    condition     = var.shutdown_grace_seconds >= 1 && var.shutdown_grace_seconds <= 100
    error_message = "shutdown_grace_seconds must be from 1 to 100 (ECS's stopTimeout, at most 120 s, must exceed it by stop_timeout_margin_seconds)."
  }
}

variable "stop_timeout_margin_seconds" {
  description = "Seconds added to shutdown_grace_seconds to make the containers' stopTimeout (ECS SIGKILLs after it): time to hand work back, sign out and exit. The fargate runtime needs 8 and refuses to start with less (TOREN_FARGATE_STOP_TIMEOUT)."
  type        = number
  default     = 15

  validation {
    condition     = var.stop_timeout_margin_seconds >= 10 && var.stop_timeout_margin_seconds <= 20
    error_message = "stop_timeout_margin_seconds must be from 10 to 20 (the fargate runtime needs 8 s beyond the grace; grace + margin stays within ECS's 120 s)."
  }
}

# -- queue depth metric (published by the fargate runtime) -----------------------------------------

variable "queue_depth_metric_namespace" {
  description = "CloudWatch namespace the workers publish their queue depth in (TOREN_FARGATE_METRIC_NAMESPACE); the worker role may PutMetricData in this namespace only."
  type        = string
  default     = "Toren"

  validation {
    condition     = can(regex("^[A-Za-z0-9_./#:-]{1,255}$", var.queue_depth_metric_namespace)) && !startswith(var.queue_depth_metric_namespace, "AWS/")
    error_message = "queue_depth_metric_namespace must be a custom CloudWatch namespace (not AWS/...)."
  }
}

variable "queue_depth_metric_name" {
  description = "Name of the queue depth metric the autoscaling policy follows (the fargate runtime publishes QueueDepth)."
  type        = string
  default     = "QueueDepth"
}

variable "queue_depth_fleet" {
  description = "The Fleet dimension of the queue depth metric (TOREN_FARGATE_FLEET of the workers; null: name). The fargate runtime publishes QueueDepth with Fleet=<this> for the fleet's agents together, which the autoscaling policy follows."
  type        = string
  default     = null

  validation {
    condition     = var.queue_depth_fleet == null || can(regex("^[ -~]{1,255}$", var.queue_depth_fleet))
    error_message = "queue_depth_fleet must be null or 1-255 printable ASCII characters."
  }
}

variable "queue_depth_metric_statistic" {
  description = "Statistic over the workers' data points: every worker reports the same fleet depth, so Maximum (not Sum)."
  type        = string
  default     = "Maximum"

  validation {
    condition     = contains(["Average", "Maximum", "Minimum", "Sum"], var.queue_depth_metric_statistic)
    error_message = "queue_depth_metric_statistic must be Average, Maximum, Minimum or Sum."
  }
}

# -- database ------------------------------------------------------------------------------------

variable "db_instance_class" {
  description = "RDS instance class."
  type        = string
  default     = "db.t4g.micro"

  validation {
    condition     = startswith(var.db_instance_class, "db.")
    error_message = "db_instance_class must be an RDS class such as db.t4g.micro."
  }
}

variable "db_engine_version" {
  description = "PostgreSQL major version (minor versions upgrade automatically in the maintenance window)."
  type        = string
  default     = "16"

  validation {
    condition     = contains(["14", "15", "16", "17"], var.db_engine_version)
    error_message = "db_engine_version must be a PostgreSQL major version: 14, 15, 16 or 17."
  }
}

variable "db_allocated_storage" {
  description = "Initial gp3 storage in GiB (grows automatically up to db_max_allocated_storage)."
  type        = number
  default     = 20

  validation {
    condition     = var.db_allocated_storage >= 20
    error_message = "db_allocated_storage must be at least 20 GiB."
  }
}

variable "db_max_allocated_storage" {
  description = "Ceiling of storage autoscaling in GiB."
  type        = number
  default     = 200

  validation {
    condition     = var.db_max_allocated_storage >= 20
    error_message = "db_max_allocated_storage must be at least 20 GiB."
  }
}

variable "db_multi_az" {
  description = "A standby in a second AZ with automatic failover (doubles the instance cost)."
  type        = bool
  default     = true
}

variable "db_backup_retention_days" {
  description = "Days of automated backups (point-in-time recovery window)."
  type        = number
  default     = 14

  validation {
    condition     = var.db_backup_retention_days >= 1 && var.db_backup_retention_days <= 35
    error_message = "db_backup_retention_days must be from 1 to 35."
  }
}

variable "db_deletion_protection" {
  description = "Refuse to delete the database (terraform destroy fails until this is false and applied)."
  type        = bool
  default     = true
}

variable "db_ca_cert_identifier" {
  description = "RDS certificate authority of the instance's server certificate; the tasks verify it against the RDS CA bundle (sslmode=verify-full)."
  type        = string
  default     = "rds-ca-rsa2048-g1"

  validation {
    condition     = contains(["rds-ca-rsa2048-g1", "rds-ca-rsa4096-g1", "rds-ca-ecc384-g1"], var.db_ca_cert_identifier)
    error_message = "db_ca_cert_identifier must be rds-ca-rsa2048-g1, rds-ca-rsa4096-g1 or rds-ca-ecc384-g1."
  }
}

variable "db_ca_bundle_path" {
  description = "Path of the RDS CA bundle inside the image (aws/image/Dockerfile puts it there); DATABASE_URL's sslrootcert."
  type        = string
  default     = "/etc/ssl/certs/rds-global-bundle.pem"

  validation {
    condition     = startswith(var.db_ca_bundle_path, "/")
    error_message = "db_ca_bundle_path must be an absolute path inside the image."
  }
}

# -- edge, logs, tags ----------------------------------------------------------------------------

variable "cloudfront_price_class" {
  description = "CloudFront price class (PriceClass_100: North America and Europe edges only, the cheapest)."
  type        = string
  default     = "PriceClass_100"

  validation {
    condition     = contains(["PriceClass_100", "PriceClass_200", "PriceClass_All"], var.cloudfront_price_class)
    error_message = "cloudfront_price_class must be PriceClass_100, PriceClass_200 or PriceClass_All."
  }
}

variable "waf_rate_limit" {
  description = "Requests one client IP may make in 5 minutes before the web ACL blocks it."
  type        = number
  default     = 2000

  validation {
    condition     = var.waf_rate_limit >= 100
    error_message = "waf_rate_limit must be at least 100 (WAF's smallest rate limit)."
  }
}

variable "log_retention_days" {
  description = "Days CloudWatch keeps the services', flow and database logs."
  type        = number
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a value CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, ...)."
  }
}

variable "access_log_retention_days" {
  description = "Days the load balancer's access logs stay in S3."
  type        = number
  default     = 90

  validation {
    condition     = var.access_log_retention_days >= 1
    error_message = "access_log_retention_days must be at least 1."
  }
}

variable "tags" {
  description = "Tags added to every resource that takes tags."
  type        = map(string)
  default     = {}
}
