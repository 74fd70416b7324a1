"""The demo's source systems outside the lake: the shop writing orders into PostgreSQL and the
web servers sending page views to Kafka (`make demo-sources`).

    python -m definitions.source_data setup             # table, topic, three days of data
    python -m definitions.source_data change-order      # the shop corrects one order
    python -m definitions.source_data views --date D    # page views of day D arrive

The servers are the ones `definitions.sources` reads: `$PARTLAKE_DEMO_POSTGRES` and
`$PARTLAKE_DEMO_KAFKA` (with `$PGUSER` and `$PGPASSWORD`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys

from definitions.partitions import REGIONS
from definitions.sources import KAFKA_ENV, ORDERS_TABLE, POSTGRES_ENV, TOPIC

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def _connect():  # noqa: ANN202 - psycopg's connection
    import psycopg

    address, _, database = os.environ[POSTGRES_ENV].partition("/")
    host, _, port = address.partition(":")
    return psycopg.connect(host=host, port=int(port), dbname=database, autocommit=True)


def setup(orders_per_partition: int = 50, views_per_day: int = 200) -> None:
    """The orders table with three days of orders, and the topic with their page views."""
    rng = random.Random(0)
    with _connect() as connection:
        connection.execute(f"DROP TABLE IF EXISTS {ORDERS_TABLE}")
        connection.execute(
            f"CREATE TABLE {ORDERS_TABLE} (order_id bigint PRIMARY KEY, order_date date NOT NULL, "
            "region text NOT NULL, user_id bigint, amount numeric(10, 2))"
        )
        rows = [
            (len(DAYS) * 1000 * r + 1000 * d + i, day, region, rng.randrange(100),
             round(rng.uniform(5, 200), 2))
            for d, day in enumerate(DAYS)
            for r, region in enumerate(REGIONS)
            for i in range(orders_per_partition)
        ]  # fmt: skip
        with connection.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {ORDERS_TABLE} VALUES (%s, %s, %s, %s, %s)", rows)
    print(f"{ORDERS_TABLE}: {len(rows)} orders over {', '.join(DAYS)} x {', '.join(REGIONS)}")
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": os.environ[KAFKA_ENV]})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(timeout=60)
    for day in DAYS[:2]:
        views(day, views_per_day, seed=day)


def change_order() -> None:
    """The shop corrects the amount of one order of 2024-01-02|eu."""
    with _connect() as connection:
        found = connection.execute(
            f"UPDATE {ORDERS_TABLE} SET amount = amount + 10 WHERE order_id = "
            f"(SELECT min(order_id) FROM {ORDERS_TABLE} WHERE order_date = '2024-01-02' "
            "AND region = 'eu') RETURNING order_id"
        ).fetchone()
    print(f"{ORDERS_TABLE}: order {found[0] if found else '-'} of 2024-01-02|eu corrected")


def views(day: str, count: int, *, seed: object = None) -> None:
    """`count` page views of `day` sent to the topic."""
    from confluent_kafka import Producer

    rng = random.Random(seed if seed is not None else day)
    start = dt.datetime.fromisoformat(day)
    producer = Producer({"bootstrap.servers": os.environ[KAFKA_ENV], "log_level": 0})
    base = int(start.timestamp())
    for i in range(count):
        at = start + dt.timedelta(seconds=rng.randrange(86_400))
        view = {
            "view_id": base + i,
            "user_id": rng.randrange(500),
            "page": rng.choice(["/", "/cart", "/shoes", "/hats"]),
            "ts": at.isoformat(),
        }
        producer.produce(TOPIC, key=str(view["view_id"]), value=json.dumps(view))
    producer.flush(60)
    print(f"{TOPIC}: {count} page views of {day} sent")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m definitions.source_data")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("setup", help="the table and the topic, with three days of data")
    sub.add_parser("change-order", help="the shop corrects one order of 2024-01-02|eu")
    sent = sub.add_parser("views", help="page views of a day arrive")
    sent.add_argument("--date", required=True)
    sent.add_argument("--count", type=int, default=200)
    args = parser.parse_args(argv)
    if args.command == "setup":
        setup()
    elif args.command == "change-order":
        change_order()
    else:
        views(args.date, args.count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
