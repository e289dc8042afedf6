# The Application Load Balancer between CloudFront and the API tasks: HTTPS only (TLS 1.2+),
# reachable from CloudFront's addresses only, and forwarding only requests that carry the
# secret header CloudFront adds (anything else gets 403). Access logs go to S3.

resource "random_password" "origin_verify" {
  length  = 48
  special = false
}

resource "aws_lb" "toren" {
  #checkov:skip=CKV2_AWS_28:The web ACL is on CloudFront; the load balancer accepts only CloudFront's origin-facing addresses (security group) carrying the secret origin header (listener rule). A second, regional web ACL would filter the same requests again.
  name                       = "${var.name}-toren"
  load_balancer_type         = "application"
  internal                   = false
  subnets                    = local.public_subnet_ids
  security_groups            = [aws_security_group.alb.id]
  drop_invalid_header_fields = true
  enable_deletion_protection = true
  # below Toren's TOREN_IDLE_TIMEOUT (75 s), so the ALB closes idle connections first;
  # event streams send a heartbeat every 15 s
  idle_timeout = 60
  tags         = local.tags

  access_logs {
    bucket  = aws_s3_bucket.access_logs.id
    prefix  = "alb"
    enabled = true
  }

  depends_on = [aws_s3_bucket_policy.access_logs]
}

resource "aws_lb_target_group" "api" {
  #checkov:skip=CKV_AWS_378:TLS ends at the load balancer; the hop to the API tasks stays inside the VPC's private subnets, and only the load balancer's security group may open it.
  name                 = "${var.name}-toren-api"
  port                 = 8420
  protocol             = "HTTP"
  target_type          = "ip"
  vpc_id               = local.vpc_id
  deregistration_delay = local.stop_timeout_seconds
  tags                 = local.tags

  health_check {
    path                = "/healthz"
    matcher             = "200"
    interval            = 15
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }
}

resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.toren.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = local.alb_certificate_arn
  tags              = local.tags

  lifecycle {
    precondition {
      condition     = var.route53_zone_id != null || (var.alb_certificate_arn != null && var.cloudfront_certificate_arn != null)
      error_message = "Set route53_zone_id (the module issues the certificates), or both alb_certificate_arn and cloudfront_certificate_arn."
    }
  }

  default_action {
    type = "fixed-response"
    fixed_response {
      content_type = "application/json"
      message_body = "{\"error\": {\"code\": \"forbidden\", \"message\": \"use https://${var.domain_name}\"}}"
      status_code  = "403"
    }
  }
}

resource "aws_lb_listener_rule" "from_cloudfront" {
  listener_arn = aws_lb_listener.https.arn
  priority     = 10
  tags         = local.tags

  condition {
    http_header {
      http_header_name = "X-Toren-Origin-Verify"
      values           = [random_password.origin_verify.result]
    }
  }

  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.api.arn
  }
}

# HTTP is answered with a redirect to HTTPS, never served. (Only 443 is open to CloudFront,
# which itself redirects viewers to HTTPS; this listener covers a widened security group.)
resource "aws_lb_listener" "http_redirect" {
  load_balancer_arn = aws_lb.toren.arn
  port              = 80
  protocol          = "HTTP"
  tags              = local.tags

  default_action {
    type = "redirect"
    redirect {
      protocol    = "HTTPS"
      port        = "443"
      status_code = "HTTP_301"
    }
  }
}

# -- access logs ----------------------------------------------------------------------------------

data "aws_elb_service_account" "current" {}

resource "aws_s3_bucket" "access_logs" {
  #checkov:skip=CKV_AWS_18:This is the access-log bucket; logging it to itself would loop.
  #checkov:skip=CKV_AWS_144:Access logs are operational data with a retention limit; replicating them to another region is left to the user.
  #checkov:skip=CKV_AWS_145:ALB access logs can only be delivered to buckets encrypted with SSE-S3, not SSE-KMS.
  #checkov:skip=CKV2_AWS_62:Nothing here consumes events of new log objects; they are read on demand.
  bucket_prefix = "${var.name}-toren-logs-"
  force_destroy = false
  tags          = local.tags
}

resource "aws_s3_bucket_public_access_block" "access_logs" {
  bucket                  = aws_s3_bucket.access_logs.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "access_logs" {
  bucket = aws_s3_bucket.access_logs.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_versioning" "access_logs" {
  bucket = aws_s3_bucket.access_logs.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "access_logs" {
  bucket = aws_s3_bucket.access_logs.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "access_logs" {
  bucket = aws_s3_bucket.access_logs.id

  rule {
    id     = "expire-access-logs"
    status = "Enabled"
    filter {}
    expiration {
      days = var.access_log_retention_days
    }
    noncurrent_version_expiration {
      noncurrent_days = 7
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}

data "aws_iam_policy_document" "access_logs" {
  statement {
    sid       = "LoadBalancerWritesLogs"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.access_logs.arn}/alb/AWSLogs/${local.account_id}/*"]
    principals {
      type        = "AWS"
      identifiers = [data.aws_elb_service_account.current.arn]
    }
  }
  statement {
    sid       = "LogDeliveryWritesLogs"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.access_logs.arn}/alb/AWSLogs/${local.account_id}/*"]
    principals {
      type        = "Service"
      identifiers = ["logdelivery.elasticloadbalancing.amazonaws.com"]
    }
  }
  statement {
    sid       = "HttpsOnly"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.access_logs.arn, "${aws_s3_bucket.access_logs.arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "access_logs" {
  bucket = aws_s3_bucket.access_logs.id
  policy = data.aws_iam_policy_document.access_logs.json

  depends_on = [aws_s3_bucket_public_access_block.access_logs]
}
