# The smallest root module using aws/: a new VPC, certificates and DNS in a Route 53 zone, and
# the example crews baked into the image. docs/guides/deploy-aws.md walks through it.
#
#   terraform init
#   terraform apply -target=module.toren.aws_ecr_repository.toren   # then push the image
#   terraform apply

terraform {
  required_version = ">= 1.6.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.70.0, < 7.0.0"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.6.0, < 4.0.0"
    }
  }

  # Keep state remote and encrypted: it holds the database password.
  # backend "s3" { bucket = "...", key = "toren/terraform.tfstate", region = "us-east-1", encrypt = true, use_lockfile = true }
}

variable "region" {
  description = "AWS region of the deployment."
  type        = string
  default     = "us-east-1"
}

variable "domain_name" {
  description = "Public host name of the API (e.g. toren.example.com)."
  type        = string
}

variable "route53_zone_id" {
  description = "Route 53 hosted zone that holds domain_name."
  type        = string
}

variable "image_tag" {
  description = "The image tag pushed to the module's ECR repository (Toren's version)."
  type        = string
  default     = "0.1.0"
}

variable "secret_values" {
  description = "Provider keys for the tasks, e.g. { ANTHROPIC_API_KEY = \"...\" } (pass with TF_VAR_secret_values, not in a file)."
  type        = map(string)
  default     = {}
  sensitive   = true
}

variable "long_lane_enabled" {
  description = "A worker service of its own for agents with runtime: long (docs/guides/deploy-aws.md, Long-running agents)."
  type        = bool
  default     = false
}

provider "aws" {
  region = var.region
}

# CloudFront's certificate and web ACL live in us-east-1 whatever the region.
provider "aws" {
  alias  = "us_east_1"
  region = "us-east-1"
}

module "toren" {
  source = "../.."

  providers = {
    aws           = aws
    aws.us_east_1 = aws.us_east_1
  }

  name            = "toren"
  domain_name     = var.domain_name
  route53_zone_id = var.route53_zone_id
  image_tag       = var.image_tag
  agents = [
    "research-crew", "planner-crew", "approval-desk", "desk-crew", "desk-writer", "vision-desk",
    "purchase-approval", "question-desk", "support-memory",
  ]
  secret_values = var.secret_values

  # the long lane: hours-long runs on their own, larger tasks (worker-long)
  long_lane_enabled  = var.long_lane_enabled
  worker_long_cpu    = 2048
  worker_long_memory = 8192

  environment = {
    TOREN_LOG_LEVEL = "INFO"
  }
}

output "url" {
  description = "The API's public URL."
  value       = module.toren.url
}

output "ecr_repository_url" {
  description = "Where to push the image."
  value       = module.toren.ecr_repository_url
}

output "cluster_name" {
  description = "The ECS cluster (for one-off tasks)."
  value       = module.toren.cluster_name
}

output "api_task_definition_arn" {
  description = "Task definition for toren db migrate and toren keys create."
  value       = module.toren.api_task_definition_arn
}

output "private_subnet_ids" {
  description = "Subnets for one-off tasks."
  value       = module.toren.private_subnet_ids
}

output "api_security_group_id" {
  description = "Security group for one-off tasks."
  value       = module.toren.api_security_group_id
}
