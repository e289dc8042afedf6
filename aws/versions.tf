# Terraform and provider versions this module is written for. CloudFront's certificate and
# web ACL must live in us-east-1, so the caller passes a second AWS provider for that region
# (aws.us_east_1; the same provider when the deployment is in us-east-1).
terraform {
  required_version = ">= 1.6.0"

  required_providers {
    aws = {
      source                = "hashicorp/aws"
      version               = ">= 5.70.0, < 7.0.0"
      configuration_aliases = [aws.us_east_1]
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.6.0, < 4.0.0"
    }
  }
}
