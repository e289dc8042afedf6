# CloudFront in front of the load balancer: the public HTTPS endpoint (TLS 1.2+, HTTP
# redirected to HTTPS), no caching (an API), every viewer header but Host passed on, a web ACL.

data "aws_cloudfront_cache_policy" "disabled" {
  name = "Managed-CachingDisabled"
}

# All viewer headers (Authorization included), cookies and query strings, except Host, so the
# origin sees origin_domain_name, which its certificate names.
data "aws_cloudfront_origin_request_policy" "all_viewer_except_host" {
  name = "Managed-AllViewerExceptHostHeader"
}

data "aws_cloudfront_response_headers_policy" "security_headers" {
  name = "Managed-SecurityHeadersPolicy"
}

resource "aws_cloudfront_distribution" "toren" {
  #checkov:skip=CKV_AWS_86:The load balancer's access logs (S3) record every request CloudFront forwards; the web ACL's sampled requests and metrics cover the ones it blocks.
  #checkov:skip=CKV_AWS_305:An API has no default root object; / answers with the API's index.
  #checkov:skip=CKV_AWS_310:There is one origin (the load balancer spans availability zones); a failover origin group would need a second region.
  #checkov:skip=CKV_AWS_374:Who may call the API is decided by API keys; restrict countries by adding a geo_restriction if your users allow it.
  enabled         = true
  comment         = "Toren ${var.name}"
  aliases         = [var.domain_name]
  http_version    = "http2and3"
  is_ipv6_enabled = true
  price_class     = var.cloudfront_price_class
  web_acl_id      = aws_wafv2_web_acl.toren.arn
  tags            = local.tags

  origin {
    origin_id   = "alb"
    domain_name = local.origin_domain_name

    custom_origin_config {
      http_port                = 80
      https_port               = 443
      origin_protocol_policy   = "https-only"
      origin_ssl_protocols     = ["TLSv1.2"]
      origin_read_timeout      = 60
      origin_keepalive_timeout = 60
    }

    custom_header {
      name  = "X-Toren-Origin-Verify"
      value = random_password.origin_verify.result
    }
  }

  default_cache_behavior {
    target_origin_id           = "alb"
    viewer_protocol_policy     = "redirect-to-https"
    allowed_methods            = ["DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"]
    cached_methods             = ["GET", "HEAD"]
    cache_policy_id            = data.aws_cloudfront_cache_policy.disabled.id
    origin_request_policy_id   = data.aws_cloudfront_origin_request_policy.all_viewer_except_host.id
    response_headers_policy_id = data.aws_cloudfront_response_headers_policy.security_headers.id
    compress                   = true
  }

  restrictions {
    geo_restriction {
      restriction_type = "none"
    }
  }

  viewer_certificate {
    acm_certificate_arn      = local.cloudfront_certificate_arn
    ssl_support_method       = "sni-only"
    minimum_protocol_version = "TLSv1.2_2021"
  }
}

# -- web ACL (CloudFront's must be in us-east-1) ---------------------------------------------------

resource "aws_wafv2_web_acl" "toren" {
  #checkov:skip=CKV2_AWS_31:Full WAF logging costs per GB; sampled requests and CloudWatch metrics are on. Add an aws_wafv2_web_acl_logging_configuration to keep every request.
  provider    = aws.us_east_1
  name        = "${var.name}-toren"
  description = "Toren ${var.name}: AWS managed rules (common, known bad inputs, anonymous IPs) and a per-IP rate limit"
  scope       = "CLOUDFRONT"
  tags        = local.tags

  default_action {
    allow {}
  }

  rule {
    name     = "rate-limit-per-ip"
    priority = 0
    action {
      block {}
    }
    statement {
      rate_based_statement {
        limit              = var.waf_rate_limit
        aggregate_key_type = "IP"
      }
    }
    visibility_config {
      cloudwatch_metrics_enabled = true
      metric_name                = "${var.name}-rate-limit"
      sampled_requests_enabled   = true
    }
  }

  rule {
    name     = "aws-common"
    priority = 1
    override_action {
      none {}
    }
    statement {
      managed_rule_group_statement {
        vendor_name = "AWS"
        name        = "AWSManagedRulesCommonRuleSet"
        # Agent inputs are free text that often quotes code, HTML and paths, and uploads are
        # up to TOREN_MAX_FILE_BYTES: count these body rules instead of blocking them.
        dynamic "rule_action_override" {
          for_each = toset(["SizeRestrictions_BODY", "CrossSiteScripting_BODY", "GenericLFI_BODY", "GenericRFI_BODY"])
          content {
            name = rule_action_override.value
            action_to_use {
              count {}
            }
          }
        }
      }
    }
    visibility_config {
      cloudwatch_metrics_enabled = true
      metric_name                = "${var.name}-aws-common"
      sampled_requests_enabled   = true
    }
  }

  rule {
    name     = "aws-anonymous-ip"
    priority = 3
    override_action {
      none {}
    }
    statement {
      managed_rule_group_statement {
        vendor_name = "AWS"
        name        = "AWSManagedRulesAnonymousIpList"
        # Programs call the API from servers (CI jobs, MCP clients, toren.client): count
        # hosting providers' addresses instead of blocking them; Tor and anonymizers stay blocked.
        rule_action_override {
          name = "HostingProviderIPList"
          action_to_use {
            count {}
          }
        }
      }
    }
    visibility_config {
      cloudwatch_metrics_enabled = true
      metric_name                = "${var.name}-anonymous-ip"
      sampled_requests_enabled   = true
    }
  }

  rule {
    name     = "aws-known-bad-inputs"
    priority = 2
    override_action {
      none {}
    }
    statement {
      managed_rule_group_statement {
        vendor_name = "AWS"
        name        = "AWSManagedRulesKnownBadInputsRuleSet"
      }
    }
    visibility_config {
      cloudwatch_metrics_enabled = true
      metric_name                = "${var.name}-known-bad-inputs"
      sampled_requests_enabled   = true
    }
  }

  visibility_config {
    cloudwatch_metrics_enabled = true
    metric_name                = "${var.name}-toren"
    sampled_requests_enabled   = true
  }
}
