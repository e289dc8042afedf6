-- The claim's dead-letter sweep looks for ready messages delivered max_deliveries times or
-- more. queue_claim_idx narrows by agent and time only, so behind a backlog of ready messages
-- that no one has taken yet, each claim read every one of them (100,000 ready messages: 27x
-- the claim latency of an empty queue, bench figure 10). Messages never delivered
-- (attempts = 0) cannot be dead: this index holds only the others, and the sweep says
-- attempts > 0 so that the planner uses it.
CREATE INDEX queue_redelivered_idx ON toren_control.queue (agent, available_at)
    WHERE attempts > 0;

-- The claim takes the oldest ready messages (ORDER BY available_at, id LIMIT n). With
-- agent = ANY(...) the (agent, available_at) index does not return that order, so Postgres
-- read and sorted every ready message on each claim (behind 100,000: ~60 ms a claim). In
-- this order an index scan stops after n.
CREATE INDEX queue_ready_order_idx ON toren_control.queue (available_at, id);
