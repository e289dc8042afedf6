# RDS PostgreSQL: Toren's event log, state and outbox (the same store code as everywhere else).
# Encrypted, private, TLS enforced (rds.force_ssl), backed up, protected from deletion.

resource "aws_db_subnet_group" "toren" {
  name        = "${var.name}-toren"
  description = "Private subnets of the Toren database"
  subnet_ids  = local.private_subnet_ids
  tags        = local.tags
}

resource "aws_db_parameter_group" "toren" {
  name_prefix = "${var.name}-toren-"
  family      = "postgres${var.db_engine_version}"
  description = "Toren: TLS required, slow statements and connections logged"
  tags        = local.tags

  # refuse any connection without TLS
  parameter {
    name  = "rds.force_ssl"
    value = "1"
  }
  parameter {
    name  = "ssl_min_protocol_version"
    value = "TLSv1.2"
  }
  parameter {
    name  = "log_min_duration_statement"
    value = "1000"
  }
  parameter {
    name  = "log_statement"
    value = "ddl"
  }
  parameter {
    name  = "log_connections"
    value = "1"
  }
  parameter {
    name  = "log_disconnections"
    value = "1"
  }

  lifecycle {
    create_before_destroy = true
  }
}

# Letters and digits only, so the password needs no escaping in DATABASE_URL.
resource "random_password" "database" {
  length  = 40
  special = false
}

resource "aws_db_instance" "toren" {
  identifier     = "${var.name}-toren"
  engine         = "postgres"
  engine_version = var.db_engine_version
  instance_class = var.db_instance_class
  db_name        = "toren"
  username       = "toren"
  password       = random_password.database.result
  port           = 5432

  allocated_storage     = var.db_allocated_storage
  max_allocated_storage = var.db_max_allocated_storage
  storage_type          = "gp3"
  storage_encrypted     = true
  kms_key_id            = aws_kms_key.toren.arn

  db_subnet_group_name   = aws_db_subnet_group.toren.name
  vpc_security_group_ids = [aws_security_group.database.id]
  publicly_accessible    = false
  multi_az               = var.db_multi_az
  parameter_group_name   = aws_db_parameter_group.toren.name
  ca_cert_identifier     = var.db_ca_cert_identifier

  backup_retention_period    = var.db_backup_retention_days
  backup_window              = "03:00-04:00"
  maintenance_window         = "sun:04:30-sun:05:30"
  copy_tags_to_snapshot      = true
  deletion_protection        = var.db_deletion_protection
  skip_final_snapshot        = false
  final_snapshot_identifier  = "${var.name}-toren-final"
  auto_minor_version_upgrade = true
  apply_immediately          = false

  iam_database_authentication_enabled   = true
  enabled_cloudwatch_logs_exports       = ["postgresql", "upgrade"]
  monitoring_interval                   = 60
  monitoring_role_arn                   = aws_iam_role.rds_monitoring.arn
  performance_insights_enabled          = true
  performance_insights_kms_key_id       = aws_kms_key.toren.arn
  performance_insights_retention_period = 7

  tags = local.tags

  depends_on = [aws_cloudwatch_log_group.database]
}
