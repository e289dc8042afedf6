# CloudWatch log groups, encrypted with the deployment's key and kept log_retention_days.
# The database's group is created here (before RDS would create it unencrypted, unexpiring).

resource "aws_cloudwatch_log_group" "api" {
  name              = "/toren/${var.name}/api"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.toren.arn
  tags              = local.tags
}

resource "aws_cloudwatch_log_group" "worker" {
  name              = "/toren/${var.name}/worker"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.toren.arn
  tags              = local.tags
}

resource "aws_cloudwatch_log_group" "database" {
  for_each = toset(["postgresql", "upgrade"])

  name              = "/aws/rds/instance/${var.name}-toren/${each.key}"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.toren.arn
  tags              = local.tags
}

resource "aws_cloudwatch_log_group" "flow" {
  count = local.create_vpc ? 1 : 0

  name              = "/toren/${var.name}/vpc-flow"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.toren.arn
  tags              = local.tags
}
