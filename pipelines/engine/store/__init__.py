"""What is stored on disk: a run's folder (`RunDir`: its config, questions, run.json and traces) and its append-only
results store (`ResultStore`, written through `RunFolderSink`), a sweep's folder (`SweepFolder`: its sweep.json), and a
driver's heartbeat in the folders it drives (`Heartbeat`; `driver_state` tells a dead driver's runs from running
ones). A file is written whole (`atomic_write`) or appended and fsynced (`append_durably`): a killed driver leaves
nothing torn.
"""

from pipelines.engine.store._heartbeat import HEARTBEAT, Heartbeat, beat, driver_state
from pipelines.engine.store._run_folder import (
    RESULTS,
    TORN,
    NoSuchRun,
    QuestionState,
    ResultStore,
    RunDir,
    RunFolderError,
    RunFolderSink,
    Unit,
    append_durably,
    atomic_write,
    check_run_id,
    episode_key,
    git_revision,
    new_run_id,
    package_versions,
    pool_of,
    read_sweep,
    what_is_wrong,
)
from pipelines.engine.store._sweep_folder import SWEEP_FILE, SweepFolder

__all__ = ["HEARTBEAT", "Heartbeat", "NoSuchRun", "QuestionState", "RESULTS", "ResultStore", "RunDir", "RunFolderError",
           "RunFolderSink", "SWEEP_FILE", "SweepFolder", "TORN", "Unit", "append_durably", "atomic_write", "beat",
           "check_run_id", "driver_state", "episode_key", "git_revision", "new_run_id", "package_versions", "pool_of",
           "read_sweep", "what_is_wrong"]
