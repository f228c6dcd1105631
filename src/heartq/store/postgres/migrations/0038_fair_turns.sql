-- heartq schema v38 (PostgreSQL): fair shares in rotation (docs/design/limits.md, "Fair
-- shares"). The keys of a queue and priority take their turns in key order, from where
-- the last claim left off, each its weight's worth a round: a claim reads the lanes it
-- takes from, not every key with work (a claim of 10 with 5,000 keys waiting read
-- 24,748 buffers through v37's turns by virtual time, against 227 with one key).
--
-- `claim_turns`: where the turns stand, appended by each claim that took from a tier
-- (a queue and a priority) holding more than one lane: the key whose lane took last and
-- how many jobs its turn has left (0: the next claim starts at the key after it). The newest row of a tier counts (a backward walk
-- of its index, whose newest entries are live under a held xmin horizon); the
-- pruner removes the rows older than a minute that a newer one supersedes, as it does
-- claim marks. The marks' `served` and `clock` (v37's virtual times) are no longer
-- written; workers of the version before write them, and take turns by them, until they
-- run this version.
CREATE TABLE IF NOT EXISTS claim_turns (
    queue text COLLATE "C" NOT NULL,
    priority integer NOT NULL,
    fair_key text COLLATE "C" NOT NULL,
    remaining integer NOT NULL,
    made_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS claim_turns_tier_idx ON claim_turns (queue, priority, made_at);
