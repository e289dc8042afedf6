# One customer-managed key for the deployment's data at rest: the database (and its Performance
# Insights), the secret, the image repository and the CloudWatch log groups.

resource "aws_kms_key" "toren" {
  description             = "Toren ${var.name}: database, secret, images and logs"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  tags                    = local.tags

  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        # the account's IAM policies decide who else may use the key (the default key policy)
        Sid       = "AccountAdministers"
        Effect    = "Allow"
        Principal = { AWS = "arn:${local.partition}:iam::${local.account_id}:root" }
        Action    = "kms:*"
        Resource  = "*"
      },
      {
        Sid       = "CloudWatchLogsOfThisAccount"
        Effect    = "Allow"
        Principal = { Service = "logs.${local.region}.amazonaws.com" }
        Action    = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
        Resource  = "*"
        Condition = {
          ArnLike = {
            "kms:EncryptionContext:aws:logs:arn" = "arn:${local.partition}:logs:${local.region}:${local.account_id}:log-group:*"
          }
        }
      },
    ]
  })
}

resource "aws_kms_alias" "toren" {
  name          = "alias/${var.name}-toren"
  target_key_id = aws_kms_key.toren.key_id
}
