# Worker autoscaling on queue depth: target tracking keeps (queue depth / running worker tasks)
# near worker_target_backlog_per_task. The depth is the metric the fargate runtime publishes
# (toren-fargate: namespace Toren, QueueDepth, dimension Fleet; variables here); the task count comes from Container Insights.

resource "aws_appautoscaling_target" "worker" {
  service_namespace  = "ecs"
  resource_id        = "service/${aws_ecs_cluster.toren.name}/${aws_ecs_service.worker.name}"
  scalable_dimension = "ecs:service:DesiredCount"
  min_capacity       = var.worker_min_count
  max_capacity       = max(var.worker_min_count, var.worker_max_count)
  tags               = local.tags
}

resource "aws_appautoscaling_policy" "worker_backlog" {
  name               = "${var.name}-toren-worker-backlog"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.worker.service_namespace
  resource_id        = aws_appautoscaling_target.worker.resource_id
  scalable_dimension = aws_appautoscaling_target.worker.scalable_dimension

  target_tracking_scaling_policy_configuration {
    target_value       = var.worker_target_backlog_per_task
    scale_out_cooldown = 60
    # scale-in protection keeps busy tasks alive; a slower scale-in avoids churn between runs
    scale_in_cooldown = 300

    customized_metric_specification {
      metrics {
        id          = "depth"
        label       = "Toren queue depth"
        return_data = false
        metric_stat {
          stat = var.queue_depth_metric_statistic
          metric {
            namespace   = var.queue_depth_metric_namespace
            metric_name = var.queue_depth_metric_name
            dimensions {
              name  = "Fleet"
              value = local.queue_depth_fleet
            }
          }
        }
      }
      metrics {
        id          = "tasks"
        label       = "Running worker tasks"
        return_data = false
        metric_stat {
          stat = "Average"
          metric {
            namespace   = "ECS/ContainerInsights"
            metric_name = "RunningTaskCount"
            dimensions {
              name  = "ClusterName"
              value = aws_ecs_cluster.toren.name
            }
            dimensions {
              name  = "ServiceName"
              value = aws_ecs_service.worker.name
            }
          }
        }
      }
      metrics {
        id          = "backlog_per_task"
        label       = "Queued messages per worker task"
        expression  = "depth / tasks"
        return_data = true
      }
    }
  }
}

# The long lane's service scales the same way on its own queues' depth (Fleet <fleet>-long:
# worker-long publishes only the long agents' queues).
resource "aws_appautoscaling_target" "worker_long" {
  count = var.long_lane_enabled ? 1 : 0

  service_namespace  = "ecs"
  resource_id        = "service/${aws_ecs_cluster.toren.name}/${aws_ecs_service.worker_long[0].name}"
  scalable_dimension = "ecs:service:DesiredCount"
  min_capacity       = var.worker_long_min_count
  max_capacity       = max(var.worker_long_min_count, var.worker_long_max_count)
  tags               = local.tags
}

resource "aws_appautoscaling_policy" "worker_long_backlog" {
  count = var.long_lane_enabled ? 1 : 0

  name               = "${var.name}-toren-worker-long-backlog"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.worker_long[0].service_namespace
  resource_id        = aws_appautoscaling_target.worker_long[0].resource_id
  scalable_dimension = aws_appautoscaling_target.worker_long[0].scalable_dimension

  target_tracking_scaling_policy_configuration {
    target_value       = var.worker_long_target_backlog_per_task
    scale_out_cooldown = 60
    # long runs end rarely: scale in slowly (busy tasks are protected anyway)
    scale_in_cooldown = 900

    customized_metric_specification {
      metrics {
        id          = "depth"
        label       = "Toren long-lane queue depth"
        return_data = false
        metric_stat {
          stat = var.queue_depth_metric_statistic
          metric {
            namespace   = var.queue_depth_metric_namespace
            metric_name = var.queue_depth_metric_name
            dimensions {
              name  = "Fleet"
              value = local.queue_depth_fleet_long
            }
          }
        }
      }
      metrics {
        id          = "tasks"
        label       = "Running worker-long tasks"
        return_data = false
        metric_stat {
          stat = "Average"
          metric {
            namespace   = "ECS/ContainerInsights"
            metric_name = "RunningTaskCount"
            dimensions {
              name  = "ClusterName"
              value = aws_ecs_cluster.toren.name
            }
            dimensions {
              name  = "ServiceName"
              value = aws_ecs_service.worker_long[0].name
            }
          }
        }
      }
      metrics {
        id          = "backlog_per_task"
        label       = "Queued long-lane messages per worker-long task"
        expression  = "depth / tasks"
        return_data = true
      }
    }
  }
}
