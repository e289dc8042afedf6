# Certificates and DNS. With route53_zone_id the module issues both ACM certificates (the
# load balancer's in this region, CloudFront's in us-east-1), validates them by DNS and points
# domain_name at CloudFront and origin_domain_name at the load balancer. Without it, the
# caller passes issued certificates and creates the two records (outputs dns_records).

locals {
  manage_dns = var.route53_zone_id != null

  alb_certificate_arn        = local.manage_dns ? aws_acm_certificate_validation.alb[0].certificate_arn : var.alb_certificate_arn
  cloudfront_certificate_arn = local.manage_dns ? aws_acm_certificate_validation.cloudfront[0].certificate_arn : var.cloudfront_certificate_arn
}

resource "aws_acm_certificate" "alb" {
  count = local.manage_dns ? 1 : 0

  domain_name       = local.origin_domain_name
  validation_method = "DNS"
  tags              = local.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_acm_certificate" "cloudfront" {
  count    = local.manage_dns ? 1 : 0
  provider = aws.us_east_1

  domain_name       = var.domain_name
  validation_method = "DNS"
  tags              = local.tags

  lifecycle {
    create_before_destroy = true
  }
}

locals {
  # one record per distinct validation name (both certificates may share none, or the zone's)
  certificate_validation = local.manage_dns ? {
    for option in concat(tolist(aws_acm_certificate.alb[0].domain_validation_options), tolist(aws_acm_certificate.cloudfront[0].domain_validation_options)) :
    option.domain_name => option
  } : {}
}

resource "aws_route53_record" "certificate_validation" {
  for_each = local.certificate_validation

  zone_id         = var.route53_zone_id
  name            = each.value.resource_record_name
  type            = each.value.resource_record_type
  records         = [each.value.resource_record_value]
  ttl             = 300
  allow_overwrite = true
}

resource "aws_acm_certificate_validation" "alb" {
  count = local.manage_dns ? 1 : 0

  certificate_arn         = aws_acm_certificate.alb[0].arn
  validation_record_fqdns = [aws_route53_record.certificate_validation[local.origin_domain_name].fqdn]
}

resource "aws_acm_certificate_validation" "cloudfront" {
  count    = local.manage_dns ? 1 : 0
  provider = aws.us_east_1

  certificate_arn         = aws_acm_certificate.cloudfront[0].arn
  validation_record_fqdns = [aws_route53_record.certificate_validation[var.domain_name].fqdn]
}

resource "aws_route53_record" "origin" {
  #checkov:skip=CKV2_AWS_23:The alias targets the load balancer this module creates, so it cannot dangle.
  count = local.manage_dns ? 1 : 0

  zone_id = var.route53_zone_id
  name    = local.origin_domain_name
  type    = "A"

  alias {
    name                   = aws_lb.toren.dns_name
    zone_id                = aws_lb.toren.zone_id
    evaluate_target_health = true
  }
}

resource "aws_route53_record" "public" {
  #checkov:skip=CKV2_AWS_23:The alias targets the CloudFront distribution this module creates, so it cannot dangle.
  for_each = local.manage_dns ? toset(["A", "AAAA"]) : toset([])

  zone_id = var.route53_zone_id
  name    = var.domain_name
  type    = each.value

  alias {
    name                   = aws_cloudfront_distribution.toren.domain_name
    zone_id                = aws_cloudfront_distribution.toren.hosted_zone_id
    evaluate_target_health = false
  }
}
