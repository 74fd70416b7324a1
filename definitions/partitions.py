"""Partitions of the example: daily x region, and monthly x region."""

from dagster import (
    DailyPartitionsDefinition,
    MonthlyPartitionsDefinition,
    MultiPartitionsDefinition,
    StaticPartitionsDefinition,
)

START_DATE = "2024-01-01"
REGIONS = ["eu", "us", "apac"]

regions = StaticPartitionsDefinition(REGIONS)
daily_region = MultiPartitionsDefinition(
    {"date": DailyPartitionsDefinition(start_date=START_DATE), "region": regions}
)
# fmt '%Y-%m' gives keys like '2024-01|eu'.
monthly_region = MultiPartitionsDefinition(
    {"month": MonthlyPartitionsDefinition(start_date="2024-01", fmt="%Y-%m"), "region": regions}
)
