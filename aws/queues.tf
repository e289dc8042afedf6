# SQS: one queue per agent and its dead-letter queue, named and configured as toren-sqs expects
# (plugins/toren-sqs: <prefix><agent>, <prefix><agent>-dlq, 14 days' retention, redrive after
# TOREN_MAX_DELIVERIES + 5 receives as a backstop). The tasks run with TOREN_SQS_CREATE_QUEUES=0.

locals {
  # toren-sqs's REDRIVE_MARGIN: Toren dead-letters after max_deliveries itself, with the reason
  redrive_max_receives  = var.max_deliveries + 5
  message_retention_s   = 14 * 24 * 3600
  queue_names           = { for agent in var.agents : agent => "${var.sqs_prefix}${agent}" }
  dead_letter_names     = { for agent in var.agents : agent => "${var.sqs_prefix}${agent}-dlq" }
  all_queue_arns        = concat([for queue in aws_sqs_queue.agent : queue.arn], [for queue in aws_sqs_queue.dead_letters : queue.arn])
  longest_queue_name_ok = alltrue([for name in values(local.dead_letter_names) : length(name) <= 80])
}

resource "aws_sqs_queue" "dead_letters" {
  for_each = local.dead_letter_names

  name                      = each.value
  message_retention_seconds = local.message_retention_s
  sqs_managed_sse_enabled   = true
  tags                      = merge(local.tags, { "toren:agent" = each.key })

  lifecycle {
    precondition {
      condition     = local.longest_queue_name_ok
      error_message = "sqs_prefix + agent name + '-dlq' must be at most 80 characters (SQS's limit): shorten sqs_prefix or the agent's name."
    }
  }
}

resource "aws_sqs_queue" "agent" {
  for_each = local.queue_names

  name                       = each.value
  message_retention_seconds  = local.message_retention_s
  receive_wait_time_seconds  = 20
  visibility_timeout_seconds = 30
  sqs_managed_sse_enabled    = true
  tags                       = merge(local.tags, { "toren:agent" = each.key })

  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dead_letters[each.key].arn
    maxReceiveCount     = local.redrive_max_receives
  })
}

# Only the agent's own queue may dead-letter into its DLQ.
resource "aws_sqs_queue_redrive_allow_policy" "dead_letters" {
  for_each = local.queue_names

  queue_url = aws_sqs_queue.dead_letters[each.key].id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.agent[each.key].arn]
  })
}
