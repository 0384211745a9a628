"""The CSV interchange formats of docs/design.md §6 (colocations, throughputs, executions), defined once.

Two readers take these files: `profile import` (`profiler.importers`, rows → store records) and the models
(`advisor.datasets`, a file → a typed frame). Both read which columns a format requires, which it knows as
optional, and how each column is typed from here, so a file one accepts the other accepts too. It lives in the
profiler, the lower layer: the advisor may import the profiler, not the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass

import collector.sharing as collector_sharing


class InputDataError(ValueError):
    """An input data file (CSV, JSON, trace) that cannot be used as it is; the message names the file, the row and
    the column. The one error class of every reader of these formats (`profile import`, the models' data sets, the
    simulator's inputs): a CLI turns it into one `error:` line, the API into a 4xx."""


# Spellings of a true/false cell (compared in lower case); an empty cell is false to `profile import` and unknown
# to the models.
TRUE_VALUES = frozenset({"1", "1.0", "true", "yes", "y", "t"})
FALSE_VALUES = frozenset({"0", "0.0", "false", "no", "n", "f", ""})

# How a co-located pair shared its GPU (DESIGN §11): contexts taking turns in the default compute mode, kernels of
# both running at once under an MPS server, or two MIG instances. An empty `sharing` cell means unknown. Defined
# with the rule that reads it from the driver (`collector.sharing`), the collector's snapshot and the local runner's.
SHARING_MODES = collector_sharing.SHARING_MODES


# The largest whole numbers the store holds: counts and batch sizes are SQL INTEGER columns (32-bit on PostgreSQL),
# byte counts BIGINT. A larger value in a file or a TrialRun is refused where it is read, naming the field.
MAX_COUNT = 2**31 - 1
MAX_BYTES = 2**63 - 1


@dataclass(frozen=True, slots=True)
class CsvFormat:
    """Columns of one interchange format and their types.

    `features` are needed for a prediction, `labels` only for training and import, `optional` may be absent or
    empty. Every numeric column is in `numbers` (`ratios` among them: 0..1), true/false columns in `flags`, times
    (ISO 8601 or unix seconds) in `times`; any other column is text.
    """

    name: str
    features: tuple[str, ...]
    labels: tuple[str, ...]
    optional: tuple[str, ...]
    numbers: frozenset[str]
    ratios: frozenset[str]
    flags: frozenset[str]
    times: frozenset[str]
    min_train_rows: int

    @property
    def required(self) -> tuple[str, ...]:
        return (*self.features, *self.labels)

    @property
    def known(self) -> tuple[str, ...]:
        return (*self.features, *self.labels, *self.optional)


_SIDE_RATIOS = frozenset({"sm_util_a", "mem_bw_util_a", "sm_util_b", "mem_bw_util_b"})

COLOCATIONS = CsvFormat(
    name="colocations",
    features=("gpu_model", "workload_a", "workload_b", "solo_throughput_a", "solo_throughput_b"),
    labels=("coloc_throughput_a", "coloc_throughput_b"),
    optional=(
        "sm_util_a",
        "mem_bw_util_a",
        "mem_bytes_a",
        "sm_util_b",
        "mem_bw_util_b",
        "mem_bytes_b",
        "batch_size_a",
        "batch_size_b",
        "amp_a",
        "amp_b",
        "family_a",
        "family_b",
        "sharing",
    ),
    numbers=_SIDE_RATIOS
    | {
        "solo_throughput_a",
        "solo_throughput_b",
        "coloc_throughput_a",
        "coloc_throughput_b",
        "mem_bytes_a",
        "mem_bytes_b",
        "batch_size_a",
        "batch_size_b",
    },
    ratios=_SIDE_RATIOS,
    flags=frozenset({"amp_a", "amp_b"}),
    times=frozenset(),
    min_train_rows=20,
)

_PROFILE_RATIOS = frozenset({"sm_util", "sm_util_mean", "sm_util_p95", "mem_bw_util"})

THROUGHPUTS = CsvFormat(
    name="throughputs",
    features=("workload", "gpu_model", "gpu_count", "nodes", "batch_size"),
    labels=("throughput",),
    # `sm_util` is the mean SM utilisation; `sm_util_mean` is the same measurement under the profiler's name.
    optional=(
        "sm_util",
        "mem_bw_util",
        "mem_bytes",
        "amp",
        "step_time_seconds",
        "sm_util_mean",
        "sm_util_p95",
        "power_watts",
    ),
    numbers=_PROFILE_RATIOS
    | {"gpu_count", "nodes", "batch_size", "throughput", "mem_bytes", "step_time_seconds", "power_watts"},
    ratios=_PROFILE_RATIOS,
    flags=frozenset({"amp"}),
    times=frozenset(),
    min_train_rows=20,
)

EXECUTIONS = CsvFormat(
    name="executions",
    features=("job_id", "workload", "user", "gpu_model", "gpu_count", "submit_time"),
    labels=("start_time", "end_time"),
    optional=("queue", "node", "mean_utilization"),
    numbers=frozenset({"gpu_count", "mean_utilization"}),
    ratios=frozenset({"mean_utilization"}),
    flags=frozenset(),
    times=frozenset({"submit_time", "start_time", "end_time"}),
    min_train_rows=30,
)
