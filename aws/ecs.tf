# The ECS cluster and its two Fargate services from one image: the API (toren serve, behind
# the load balancer) and the workers (toren worker with TOREN_QUEUE=sqs, TOREN_RUNTIME=fargate;
# by default one worker process per vCPU of the task, under a supervisor: worker_processes).
# Root filesystems are read-only; /tmp and TOREN_HOME are per-task scratch volumes.

resource "aws_ecs_cluster" "toren" {
  name = "${var.name}-toren"
  tags = local.tags

  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

locals {
  scratch_volumes = ["tmp", "toren-home"]
  scratch_mounts = [
    { sourceVolume = "tmp", containerPath = "/tmp", readOnly = false },
    { sourceVolume = "toren-home", containerPath = "/home/toren/.toren", readOnly = false },
  ]

  api_container = {
    name                   = "api"
    image                  = local.image
    essential              = true
    command                = ["serve"]
    user                   = "10001"
    readonlyRootFilesystem = true
    privileged             = false
    stopTimeout            = local.stop_timeout_seconds
    portMappings           = [{ containerPort = 8420, protocol = "tcp" }]
    environment            = [for key, value in local.api_environment : { name = key, value = value }]
    mountPoints            = local.scratch_mounts
    linuxParameters        = { initProcessEnabled = false, capabilities = { drop = ["ALL"] } }
    healthCheck = {
      command     = ["CMD", "python3", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8420/healthz', timeout=4).status == 200 else 1)"]
      interval    = 15
      timeout     = 5
      retries     = 3
      startPeriod = 60
    }
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.api.name
        awslogs-region        = local.region
        awslogs-stream-prefix = "api"
      }
    }
  }

  worker_container = {
    name                   = "worker"
    image                  = local.image
    essential              = true
    command                = ["worker", "--processes", tostring(local.worker_processes)]
    user                   = "10001"
    readonlyRootFilesystem = true
    privileged             = false
    # SIGTERM, then SIGKILL after this: longer than TOREN_SHUTDOWN_GRACE so work drains
    stopTimeout     = local.stop_timeout_seconds
    environment     = [for key, value in local.worker_environment : { name = key, value = value }]
    mountPoints     = local.scratch_mounts
    linuxParameters = { initProcessEnabled = false, capabilities = { drop = ["ALL"] } }
    healthCheck = {
      command     = ["CMD", "python3", "-c", "import os, sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ['TOREN_FARGATE_HEALTH_PORT'], timeout=4).status == 200 else 1)"]
      interval    = 15
      timeout     = 5
      retries     = 3
      startPeriod = 60
    }
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.worker.name
        awslogs-region        = local.region
        awslogs-stream-prefix = "worker"
      }
    }
  }

  # The long lane's worker (long_lane_enabled): the same container, serving only the agents
  # with runtime: long, with its own concurrency, metric fleet and log stream prefix.
  worker_long_container = merge(local.worker_container, {
    command     = ["worker", "--processes", tostring(local.worker_long_processes)]
    environment = [for key, value in local.worker_long_environment : { name = key, value = value }]
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.worker.name
        awslogs-region        = local.region
        awslogs-stream-prefix = "worker-long"
      }
    }
  })
}

resource "aws_ecs_task_definition" "api" {
  family                   = "${var.name}-toren-api"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.api_cpu
  memory                   = var.api_memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.api_task.arn
  container_definitions    = jsonencode([local.api_container])
  tags                     = local.tags

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = "X86_64"
  }

  dynamic "volume" {
    for_each = toset(local.scratch_volumes)
    content {
      name = volume.value
    }
  }
}

resource "aws_ecs_task_definition" "worker" {
  family                   = "${var.name}-toren-worker"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.worker_cpu
  memory                   = var.worker_memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.worker_task.arn
  container_definitions    = jsonencode([local.worker_container])
  tags                     = local.tags

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = "X86_64"
  }

  dynamic "volume" {
    for_each = toset(local.scratch_volumes)
    content {
      name = volume.value
    }
  }
}

resource "aws_ecs_task_definition" "worker_long" {
  count = var.long_lane_enabled ? 1 : 0

  family                   = "${var.name}-toren-worker-long"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.worker_long_cpu
  memory                   = var.worker_long_memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.worker_task.arn
  container_definitions    = jsonencode([local.worker_long_container])
  tags                     = local.tags

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = "X86_64"
  }

  dynamic "volume" {
    for_each = toset(local.scratch_volumes)
    content {
      name = volume.value
    }
  }
}

resource "aws_ecs_service" "api" {
  name                              = "api"
  cluster                           = aws_ecs_cluster.toren.id
  task_definition                   = aws_ecs_task_definition.api.arn
  desired_count                     = var.api_desired_count
  launch_type                       = "FARGATE"
  platform_version                  = "LATEST"
  health_check_grace_period_seconds = 60
  propagate_tags                    = "SERVICE"
  enable_execute_command            = false
  tags                              = local.tags

  network_configuration {
    subnets          = local.private_subnet_ids
    security_groups  = [aws_security_group.api.id]
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.api.arn
    container_name   = "api"
    container_port   = 8420
  }

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  depends_on = [aws_lb_listener_rule.from_cloudfront]
}

resource "aws_ecs_service" "worker" {
  name                               = "worker"
  cluster                            = aws_ecs_cluster.toren.id
  task_definition                    = aws_ecs_task_definition.worker.arn
  desired_count                      = var.worker_min_count
  launch_type                        = "FARGATE"
  platform_version                   = "LATEST"
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  propagate_tags                     = "SERVICE"
  enable_execute_command             = false
  tags                               = local.tags

  network_configuration {
    subnets          = local.private_subnet_ids
    security_groups  = [aws_security_group.worker.id]
    assign_public_ip = false
  }

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  lifecycle {
    # autoscaling owns the worker count once created
    ignore_changes = [desired_count]
  }
}

# The long lane (long_lane_enabled): its own service, so hours-long runs scale and deploy apart
# from the short ones. Scale-in protection: the fargate runtime protects each task while it has
# work in hand (ECS task scale-in protection), so autoscaling never stops a task mid-run; a
# deploy's SIGTERM hands unfinished runs back to the next task (they resume from their log).
resource "aws_ecs_service" "worker_long" {
  count = var.long_lane_enabled ? 1 : 0

  name                               = "worker-long"
  cluster                            = aws_ecs_cluster.toren.id
  task_definition                    = aws_ecs_task_definition.worker_long[0].arn
  desired_count                      = var.worker_long_min_count
  launch_type                        = "FARGATE"
  platform_version                   = "LATEST"
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  propagate_tags                     = "SERVICE"
  enable_execute_command             = false
  tags                               = merge(local.tags, { "toren:lane" = "long" })

  network_configuration {
    subnets          = local.private_subnet_ids
    security_groups  = [aws_security_group.worker.id]
    assign_public_ip = false
  }

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  lifecycle {
    # autoscaling owns the worker count once created
    ignore_changes = [desired_count]
  }
}
