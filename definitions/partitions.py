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

# The daily user exports of the model kinds (definitions.models, definitions.exports): a week.
EXPORTS_START = "2024-01-01"
EXPORTS_END = "2024-01-08"  # exclusive
