-- heartq schema v21 (PostgreSQL): how a dependency's result reaches its dependent, and
-- the trace of succeeded jobs since pruned.
--
-- `job_dependencies.result_as`, for a job that takes its dependencies' results (a
-- group's callback, a pipeline step that takes the previous step's result): `value`
-- (this dependency's result is passed as it is), `item` (an item of the results list),
-- `none` (only waited for: the jobs before an empty group, a step's own `depends_on`).
-- NULL: a job that takes no results, or an edge written before v21 (an item, as then).
-- A nullable column without a default: a catalog-only change, no table rewrite.
--
-- `pruned_successes`: the id of each succeeded job the pruner deleted, written in the
-- prune's transaction, so an enqueue whose `depends_on` names it counts it succeeded
-- instead of refusing it as never stored (`DependencyNotFound`). Read only for ids not
-- found among the jobs. Forgotten once the id is older than `success_trace_retention`
-- (a job id begins with its creation time: a range of the primary key).
ALTER TABLE job_dependencies ADD COLUMN IF NOT EXISTS result_as text;

CREATE TABLE IF NOT EXISTS pruned_successes (
    id text PRIMARY KEY
);
