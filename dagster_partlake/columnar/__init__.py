"""Column-wise maps over interned keys: the storage of partition state at scale.

Holds `Interner` (with the process-wide `KEYS` and `VALUES`), `IntMap`, text cut with numpy
(`text`) and `give_back` (`memory`). Python and numpy only (imported on first use): the base both
the storage adapter (`delta/`) and the planning core build on. May import nothing else of
dagster_partlake.
"""

from dagster_partlake.columnar.interner import KEYS, VALUES, Interner, Key, KeyList, Values
from dagster_partlake.columnar.intmap import ABSENT, NONE, IntMap

__all__ = ["ABSENT", "KEYS", "NONE", "VALUES", "IntMap", "Interner", "Key", "KeyList", "Values"]
