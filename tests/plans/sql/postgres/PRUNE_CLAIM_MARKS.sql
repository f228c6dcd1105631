WITH turns AS (
    DELETE FROM claim_turns AS c
    WHERE c.made_at < coalesce(to_timestamp(%(now)s::float8), now()) - interval '1 minute'
      AND EXISTS (
          SELECT 1 FROM claim_turns AS n
          WHERE n.queue = c.queue AND n.priority = c.priority AND n.made_at > c.made_at
          OFFSET 0)
)
DELETE FROM claim_marks AS m
WHERE m.made_at < coalesce(to_timestamp(%(now)s::float8), now()) - interval '1 minute'
  AND EXISTS (
      SELECT 1 FROM claim_marks AS n
      WHERE n.queue = m.queue AND n.priority = m.priority AND n.fair_key = m.fair_key
        AND (n.frontier_xid, n.frontier_id, n.made_at)
            > (m.frontier_xid, m.frontier_id, m.made_at)
      OFFSET 0)
