-- Sessions: a run is either a one-shot run ('run') or a durable conversation ('session').
ALTER TABLE runs ADD COLUMN kind text NOT NULL DEFAULT 'run';
