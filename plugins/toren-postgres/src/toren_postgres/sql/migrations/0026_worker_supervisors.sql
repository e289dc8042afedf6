-- Worker processes under one supervisor (toren worker --processes N, toren serve --workers
-- --processes N): each records the id of the supervisor that started it, so GET /fleet and
-- toren top show which workers are one machine's processes. NULL: a worker started on its
-- own (and every worker of an older version, in a rolling deploy).

ALTER TABLE toren_control.workers ADD COLUMN supervisor text;
