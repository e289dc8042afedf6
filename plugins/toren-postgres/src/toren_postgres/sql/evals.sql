-- Evals (control migration 0027). %(name)s are bound parameters.

-- create_eval --
INSERT INTO toren_control.evals (id, status, agent, dataset_name, dataset_hash, dataset,
                                 version, human_version, model, repeat, concurrency,
                                 grader_model, source, functions, fork_at, auto_resume)
VALUES (%(id)s, 'running', %(agent)s, %(dataset_name)s, %(dataset_hash)s, %(dataset)s,
        %(version)s, %(human_version)s, %(model)s, %(repeat)s, %(concurrency)s,
        %(grader_model)s, %(source)s, %(functions)s, %(fork_at)s, %(auto_resume)s)
RETURNING created_at;

-- get_eval --
SELECT id, created_at, finished_at, status, agent, dataset, version, human_version, model,
       repeat, concurrency, grader_model, source, functions, fork_at, auto_resume
FROM toren_control.evals WHERE id = %(id)s;

-- list_evals --
-- Newest first; a page goes on after the eval named by %(before)s.
SELECT e.id, e.created_at, e.finished_at, e.status, e.agent, e.dataset, e.version,
       e.human_version, e.model, e.repeat, e.concurrency, e.grader_model, e.source, e.functions, e.fork_at,
       e.auto_resume
FROM toren_control.evals e
WHERE (%(agent)s::text IS NULL OR e.agent = %(agent)s)
  AND (%(before)s::uuid IS NULL OR (e.created_at, e.id) < (
        SELECT b.created_at, b.id FROM toren_control.evals b WHERE b.id = %(before)s))
ORDER BY e.created_at DESC, e.id DESC
LIMIT %(limit)s;

-- claim_case_run --
-- Kept once; a second claim (a resumed eval, or two at once) reads the row as it is.
WITH claimed AS (
    INSERT INTO toren_control.eval_case_runs (eval_id, case_id, repeat)
    VALUES (%(eval_id)s, %(case_id)s, %(repeat)s)
    ON CONFLICT (eval_id, case_id, repeat) DO NOTHING
    RETURNING case_id, repeat, run_id, grade, created_at, graded_at
)
SELECT case_id, repeat, run_id, grade, created_at, graded_at FROM claimed
UNION ALL
SELECT case_id, repeat, run_id, grade, created_at, graded_at
FROM toren_control.eval_case_runs
WHERE eval_id = %(eval_id)s AND case_id = %(case_id)s AND repeat = %(repeat)s;

-- set_case_run --
UPDATE toren_control.eval_case_runs SET run_id = %(run_id)s
WHERE eval_id = %(eval_id)s AND case_id = %(case_id)s AND repeat = %(repeat)s
  AND run_id IS NULL;

-- grade_case_run --
UPDATE toren_control.eval_case_runs SET grade = %(grade)s, graded_at = now()
WHERE eval_id = %(eval_id)s AND case_id = %(case_id)s AND repeat = %(repeat)s
  AND grade IS NULL;

-- case_runs --
SELECT case_id, repeat, run_id, grade, created_at, graded_at
FROM toren_control.eval_case_runs
WHERE eval_id = %(eval_id)s
ORDER BY case_id, repeat;

-- finish_eval --
UPDATE toren_control.evals
SET status = 'finished', finished_at = coalesce(finished_at, now())
WHERE id = %(id)s
RETURNING id;

-- claim_eval_leases --
-- Running evals to resume, of the agents served here, whose lease is free or expired (its
-- holder stopped renewing it: killed, or cut off), now held by %(holder)s; SKIP LOCKED: two
-- servers claiming at once never take the same eval. %(id)s narrows it to one eval; %(skip)s
-- are evals the holder waits to try again (they never crowd out the others).
UPDATE toren_control.evals e
SET lease_holder = %(holder)s, lease_expires_at = now() + make_interval(secs => %(ttl_s)s)
WHERE e.id IN (
    SELECT id FROM toren_control.evals
    WHERE status = 'running' AND agent = ANY(%(agents)s)
      AND (auto_resume OR %(id)s::uuid IS NOT NULL)
      AND (%(id)s::uuid IS NULL OR id = %(id)s)
      AND NOT (id = ANY(%(skip)s::uuid[]))
      AND (lease_holder IS NULL OR lease_holder = %(holder)s OR lease_expires_at < now())
    ORDER BY created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING e.id;

-- renew_eval_leases --
-- The leases %(holder)s still holds, moved on; one it lost (expired and taken) is not.
UPDATE toren_control.evals
SET lease_expires_at = now() + make_interval(secs => %(ttl_s)s)
WHERE id = ANY(%(ids)s) AND lease_holder = %(holder)s
RETURNING id;

-- release_eval_lease --
UPDATE toren_control.evals SET lease_holder = NULL, lease_expires_at = NULL
WHERE id = %(id)s AND lease_holder = %(holder)s;

-- eval_lease --
SELECT lease_holder, lease_expires_at, lease_expires_at > now() AS live
FROM toren_control.evals WHERE id = %(id)s;
