-- @partitions: monthly_region
-- @description: Per month and region: totals over the month's daily_region_stats (the daily
-- @description: partitions of the month are read, with no mapping to declare).
-- @audit: no_partition_emptied()
-- @audit: column_sum(revenue, 0.5, severity=warn)
select
    trunc(date, 'MM') as month,
    region,
    sum(events) as events,
    sum(purchases) as purchases,
    sum(revenue) as revenue,
    count(*) as days
from daily_region_stats
group by trunc(date, 'MM'), region
