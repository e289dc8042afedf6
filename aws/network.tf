# The VPC the module creates when no vpc_id is given: public subnets for the load balancer and
# the NAT gateway, private subnets for the tasks and the database, flow logs to CloudWatch.

data "aws_availability_zones" "available" {
  #checkov:skip=CKV_AWS_394:The VPC uses the first availability_zone_count zones by name (slice below), so a zone AWS adds later never changes which zones are used.
  state = "available"
}

locals {
  azs        = slice(data.aws_availability_zones.available.names, 0, var.availability_zone_count)
  nat_count  = local.create_vpc ? (var.nat_gateway_per_az ? var.availability_zone_count : 1) : 0
  subnet_cnt = local.create_vpc ? var.availability_zone_count : 0
}

resource "aws_vpc" "this" {
  count = local.create_vpc ? 1 : 0

  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = merge(local.tags, { Name = var.name })
}

# No rules: nothing may use the default security group.
resource "aws_default_security_group" "this" {
  count = local.create_vpc ? 1 : 0

  vpc_id = aws_vpc.this[0].id
  tags   = merge(local.tags, { Name = "${var.name}-default-unused" })
}

resource "aws_internet_gateway" "this" {
  count = local.create_vpc ? 1 : 0

  vpc_id = aws_vpc.this[0].id
  tags   = merge(local.tags, { Name = var.name })
}

resource "aws_subnet" "public" {
  count = local.subnet_cnt

  vpc_id                  = aws_vpc.this[0].id
  availability_zone       = local.azs[count.index]
  cidr_block              = cidrsubnet(var.vpc_cidr, 4, count.index)
  map_public_ip_on_launch = false
  tags                    = merge(local.tags, { Name = "${var.name}-public-${local.azs[count.index]}" })
}

resource "aws_subnet" "private" {
  count = local.subnet_cnt

  vpc_id            = aws_vpc.this[0].id
  availability_zone = local.azs[count.index]
  cidr_block        = cidrsubnet(var.vpc_cidr, 4, count.index + 8)
  tags              = merge(local.tags, { Name = "${var.name}-private-${local.azs[count.index]}" })
}

resource "aws_eip" "nat" {
  count = local.nat_count

  domain = "vpc"
  tags   = merge(local.tags, { Name = "${var.name}-nat-${count.index}" })
}

resource "aws_nat_gateway" "this" {
  count = local.nat_count

  allocation_id = aws_eip.nat[count.index].id
  subnet_id     = aws_subnet.public[count.index].id
  tags          = merge(local.tags, { Name = "${var.name}-${count.index}" })

  depends_on = [aws_internet_gateway.this]
}

resource "aws_route_table" "public" {
  count = local.create_vpc ? 1 : 0

  vpc_id = aws_vpc.this[0].id
  tags   = merge(local.tags, { Name = "${var.name}-public" })
}

resource "aws_route" "public_internet" {
  count = local.create_vpc ? 1 : 0

  route_table_id         = aws_route_table.public[0].id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.this[0].id
}

resource "aws_route_table_association" "public" {
  count = local.subnet_cnt

  subnet_id      = aws_subnet.public[count.index].id
  route_table_id = aws_route_table.public[0].id
}

# One route table per private subnet, each through its AZ's NAT gateway (or the only one).
resource "aws_route_table" "private" {
  count = local.subnet_cnt

  vpc_id = aws_vpc.this[0].id
  tags   = merge(local.tags, { Name = "${var.name}-private-${local.azs[count.index]}" })
}

resource "aws_route" "private_nat" {
  count = local.subnet_cnt

  route_table_id         = aws_route_table.private[count.index].id
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.this[var.nat_gateway_per_az ? count.index : 0].id
}

resource "aws_route_table_association" "private" {
  count = local.subnet_cnt

  subnet_id      = aws_subnet.private[count.index].id
  route_table_id = aws_route_table.private[count.index].id
}

resource "aws_flow_log" "this" {
  count = local.create_vpc ? 1 : 0

  vpc_id               = aws_vpc.this[0].id
  traffic_type         = "REJECT"
  log_destination_type = "cloud-watch-logs"
  log_destination      = aws_cloudwatch_log_group.flow[0].arn
  iam_role_arn         = aws_iam_role.flow_logs[0].arn
  tags                 = local.tags
}

# -- security groups: CloudFront -> ALB -> API tasks; tasks -> database; tasks -> HTTPS out --------

data "aws_ec2_managed_prefix_list" "cloudfront" {
  name = "com.amazonaws.global.cloudfront.origin-facing"
}

resource "aws_security_group" "alb" {
  name        = "${var.name}-alb"
  description = "Toren load balancer: HTTPS from CloudFront only"
  vpc_id      = local.vpc_id
  tags        = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "alb_from_cloudfront" {
  security_group_id = aws_security_group.alb.id
  description       = "HTTPS from CloudFront's origin-facing addresses"
  prefix_list_id    = data.aws_ec2_managed_prefix_list.cloudfront.id
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_egress_rule" "alb_to_api" {
  security_group_id            = aws_security_group.alb.id
  description                  = "To the API tasks"
  referenced_security_group_id = aws_security_group.api.id
  ip_protocol                  = "tcp"
  from_port                    = 8420
  to_port                      = 8420
}

resource "aws_security_group" "api" {
  name        = "${var.name}-api"
  description = "Toren API tasks (toren serve)"
  vpc_id      = local.vpc_id
  tags        = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "api_from_alb" {
  security_group_id            = aws_security_group.api.id
  description                  = "HTTP from the load balancer"
  referenced_security_group_id = aws_security_group.alb.id
  ip_protocol                  = "tcp"
  from_port                    = 8420
  to_port                      = 8420
}

resource "aws_security_group" "worker" {
  name        = "${var.name}-worker"
  description = "Toren worker tasks (toren worker): no inbound traffic"
  vpc_id      = local.vpc_id
  tags        = local.tags
}

# Both kinds of task reach the database, and AWS APIs and model providers over HTTPS.
resource "aws_vpc_security_group_egress_rule" "tasks_https" {
  for_each = { api = aws_security_group.api.id, worker = aws_security_group.worker.id }

  security_group_id = each.value
  description       = "HTTPS to AWS APIs, the image registry and model providers"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_egress_rule" "tasks_database" {
  for_each = { api = aws_security_group.api.id, worker = aws_security_group.worker.id }

  security_group_id            = each.value
  description                  = "PostgreSQL on RDS"
  referenced_security_group_id = aws_security_group.database.id
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
}

resource "aws_security_group" "database" {
  name        = "${var.name}-database"
  description = "Toren RDS PostgreSQL: from the Toren tasks only"
  vpc_id      = local.vpc_id
  tags        = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "database_from_tasks" {
  for_each = { api = aws_security_group.api.id, worker = aws_security_group.worker.id }

  security_group_id            = aws_security_group.database.id
  description                  = "PostgreSQL from the ${each.key} tasks"
  referenced_security_group_id = each.value
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
}
