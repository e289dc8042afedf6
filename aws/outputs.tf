# What the caller needs after apply: where the API is, where to push the image, how to run the
# one-off commands (migrations, the first API key), and what to point DNS at without Route 53.

output "url" {
  description = "The API's public URL (TOREN_URL for the CLI and toren.client)."
  value       = "https://${var.domain_name}"
}

output "cloudfront_domain_name" {
  description = "The distribution's own host name: point domain_name at it (CNAME or alias) when route53_zone_id is null."
  value       = aws_cloudfront_distribution.toren.domain_name
}

output "dns_records" {
  description = "The records domain_name and origin_domain_name need (created by the module when route53_zone_id is set)."
  value = {
    (var.domain_name)          = aws_cloudfront_distribution.toren.domain_name
    (local.origin_domain_name) = aws_lb.toren.dns_name
  }
}

output "ecr_repository_url" {
  description = "Push the image here: docker push <url>:<image_tag>."
  value       = aws_ecr_repository.toren.repository_url
}

output "image" {
  description = "The image reference both services run."
  value       = local.image
}

output "cluster_name" {
  description = "The ECS cluster."
  value       = aws_ecs_cluster.toren.name
}

output "api_service_name" {
  description = "The API service (toren serve)."
  value       = aws_ecs_service.api.name
}

output "worker_service_name" {
  description = "The worker service (toren worker)."
  value       = aws_ecs_service.worker.name
}

output "worker_long_service_name" {
  description = "The long lane's worker service (toren worker --lane long); null unless long_lane_enabled."
  value       = var.long_lane_enabled ? aws_ecs_service.worker_long[0].name : null
}

output "api_task_definition_arn" {
  description = "Task definition for one-off commands that need only the database (toren db migrate, toren keys create)."
  value       = aws_ecs_task_definition.api.arn
}

output "worker_task_definition_arn" {
  description = "Task definition for one-off commands that need the queues (toren queue dlq list/redrive)."
  value       = aws_ecs_task_definition.worker.arn
}

output "private_subnet_ids" {
  description = "Subnets to run one-off tasks in."
  value       = local.private_subnet_ids
}

output "api_security_group_id" {
  description = "Security group for one-off tasks run from the API task definition."
  value       = aws_security_group.api.id
}

output "worker_security_group_id" {
  description = "Security group for one-off tasks run from the worker task definition."
  value       = aws_security_group.worker.id
}

output "secret_arn" {
  description = "The Secrets Manager secret (TOREN_SECRETS): DATABASE_URL and secret_values."
  value       = aws_secretsmanager_secret.toren.arn
}

output "database_endpoint" {
  description = "The RDS endpoint (host:port); connections need TLS (rds.force_ssl=1)."
  value       = aws_db_instance.toren.endpoint
}

output "queue_urls" {
  description = "Each agent's SQS queue URL."
  value       = { for agent, queue in aws_sqs_queue.agent : agent => queue.url }
}

output "dead_letter_queue_urls" {
  description = "Each agent's dead-letter queue URL."
  value       = { for agent, queue in aws_sqs_queue.dead_letters : agent => queue.url }
}

output "log_groups" {
  description = "CloudWatch log groups of the services."
  value       = { api = aws_cloudwatch_log_group.api.name, worker = aws_cloudwatch_log_group.worker.name }
}
