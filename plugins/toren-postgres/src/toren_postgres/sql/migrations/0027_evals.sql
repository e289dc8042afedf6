-- Evals (docs/guides/evals.md): a dataset run against one version of an agent, each case run
-- a durable run of that agent. The eval keeps its whole dataset, so resuming or reporting it
-- never reads the files again.
CREATE TABLE toren_control.evals (
    id            uuid PRIMARY KEY,
    created_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    -- running | finished
    status        text NOT NULL DEFAULT 'running',
    agent         text NOT NULL,
    dataset_name  text NOT NULL,
    -- SHA-256 of the cases' content (toren.core.eval_cases.dataset_hash)
    dataset_hash  text NOT NULL,
    -- Dataset.to_json(): name, description, hash, cases
    dataset       jsonb NOT NULL,
    -- the agent version's hash the case runs are pinned to, and its version: string
    version       text NOT NULL,
    human_version text,
    -- the model the case runs use instead of the agent's (NULL: the agent's)
    model         text,
    repeat        integer NOT NULL CHECK (repeat >= 1),
    concurrency   integer NOT NULL CHECK (concurrency >= 1),
    grader_model  text,
    -- where the definition came from (--dir DIR, --version V), for people
    source        text NOT NULL DEFAULT '',
    -- the evals.py that grades function: graders (a path on the machine that started it)
    functions     text,
    -- replays by fork: cases made from recorded runs fork them at this step (NULL: fresh runs)
    fork_at       integer CHECK (fork_at >= 0)
);
CREATE INDEX evals_created_idx ON toren_control.evals (created_at DESC, id DESC);
CREATE INDEX evals_agent_idx ON toren_control.evals (agent, created_at DESC, id DESC);

-- One row per (eval, case, repeat), claimed before its run is created: the primary key is
-- what keeps a resumed eval from starting a second run of a case (the run itself is created
-- with an idempotency key made of the same three, see toren.core.evals.idempotency_key).
CREATE TABLE toren_control.eval_case_runs (
    eval_id     uuid NOT NULL REFERENCES toren_control.evals (id) ON DELETE CASCADE,
    case_id     text NOT NULL,
    repeat      integer NOT NULL CHECK (repeat >= 1),
    created_at  timestamptz NOT NULL DEFAULT now(),
    run_id      text,
    -- the verdict, checks, trajectory and grader cost (toren.core.evals.verdict); set once
    grade       jsonb,
    graded_at   timestamptz,
    PRIMARY KEY (eval_id, case_id, repeat)
);
