# The image repository the services pull from (unless var.image names another): tags are
# immutable, so a tag always means the same image and a rollback is a tag change.

resource "aws_ecr_repository" "toren" {
  name                 = "${var.name}/toren"
  image_tag_mutability = "IMMUTABLE"
  tags                 = local.tags

  image_scanning_configuration {
    scan_on_push = true
  }

  encryption_configuration {
    encryption_type = "KMS"
    kms_key         = aws_kms_key.toren.arn
  }
}

resource "aws_ecr_lifecycle_policy" "toren" {
  repository = aws_ecr_repository.toren.name
  policy = jsonencode({
    rules = [{
      rulePriority = 1
      description  = "Keep the newest 50 images (rollbacks need the previous tags)"
      selection    = { tagStatus = "any", countType = "imageCountMoreThan", countNumber = 50 }
      action       = { type = "expire" }
    }]
  })
}
