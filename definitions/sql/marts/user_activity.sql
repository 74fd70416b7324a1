-- @kind: merge
-- @partitions: daily_region
-- @unique_key: user_id, region
-- @partition_by: region
-- @constraint: not_null(user_id, last_seen)
-- @description: Each user's latest day of activity per region: each day's events upserted on
-- @description: (user_id, region), one day after the other.
select
    user_id,
    region,
    max(event_ts) as last_seen,
    date as last_date,
    count(*) as events,
    sum(case when event_type = 'purchase' then amount end) as revenue
from staging.events
group by user_id, region, date
