//! Removal of clusters left behind by earlier processes that were killed before cleaning up.

use std::path::Path;
use std::sync::Once;
use std::time::Duration;

use crate::{ipc, proctree};

/// Name prefix of every cluster's temporary directory.
pub(crate) const DIR_PREFIX: &str = "pgcluster-";
/// File in a cluster directory holding the pid of the process that owns it.
pub(crate) const OWNER_FILE: &str = "owner.pid";
/// File marking a cluster directory kept on purpose (`PGCLUSTER_KEEP`); never swept.
pub(crate) const KEEP_FILE: &str = "keep";

/// Sweeps the temp directory once per process. Best effort; never fails.
pub(crate) fn sweep_once() {
    static ONCE: Once = Once::new();
    ONCE.call_once(sweep_stale);
}

/// Cleans up after processes that died without cleaning up (e.g. SIGKILLed test binaries):
/// for each `$TMPDIR/pgcluster-*` directory whose `owner.pid` process is gone (and that was
/// not kept with `PGCLUSTER_KEEP`), kills the server recorded in its `postmaster.pid`,
/// releases its shared memory and removes the directory. Best effort; never fails.
///
/// [`ClusterBuilder::start`](crate::ClusterBuilder::start) runs this once per process.
pub fn sweep_stale() {
    sweep(&std::env::temp_dir());
}

/// Kills and removes `pgcluster-*` directories under `tmp` whose owner process is gone.
fn sweep(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let dir = entry.path();
        if dir.join(KEEP_FILE).exists() {
            continue;
        }
        let Some(owner) = std::fs::read_to_string(dir.join(OWNER_FILE))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        else {
            continue;
        };
        if owner == std::process::id() as i32 || proctree::is_alive(owner) {
            continue;
        }
        let data_dir = dir.join("data");
        if let Some(pm) = std::fs::read_to_string(data_dir.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
            && proctree::is_alive(pm)
            && proctree::looks_like_postgres(pm)
        {
            let mut killed = proctree::kill_tree(pm);
            killed.push(pm);
            proctree::wait_all_gone(&killed, Duration::from_secs(10));
        }
        ipc::release(&data_dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
