-- raw_events cleaned in SQL: the same rules as the Python asset clean_events.
-- @partitions: daily_region
-- @description: Source events with a user, one row per event id, amounts at least 0 and
-- @description: event types in lower case (clean_events, written in SQL).
-- @constraint: not_null(event_id, user_id)
-- @constraint: unique(event_id)
-- @constraint: expression(amount >= 0, name=non_negative)
-- @owners: team:analytics
with ranked as (
    select
        event_id, user_id, event_type, amount, event_ts, date, region,
        row_number() over (partition by event_id, date, region order by event_ts) as n
    from raw_events
    where user_id is not null
)
select
    event_id,
    user_id,
    lower(event_type) as event_type,
    greatest(amount, cast(0 as decimal(10, 2))) as amount,
    event_ts,
    date,
    region
from ranked
where n = 1
