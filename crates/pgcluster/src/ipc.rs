//! Releasing the shared memory of a server that was killed (SIGKILL) rather than stopped.
//!
//! A killed postmaster leaves behind its small System V segment (which counts against the
//! machine-wide `shmmni` limit) and its POSIX dynamic-shared-memory control segment in
//! `/dev/shm`. A restart on the same data directory reclaims both, but a data directory that
//! is deleted after a kill would leak them, so clean-up calls [`release`] first.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::proctree;

/// `PGShmemMagic` from PostgreSQL's `pg_shmem.h`.
const PG_SHMEM_MAGIC: i32 = 679_834_894;
/// `PG_DYNSHMEM_CONTROL_MAGIC` from PostgreSQL's `dsm.c`.
const DSM_CONTROL_MAGIC: u32 = 0x9a50_3d32;
/// Offset of the first `dsm_control_item` (after magic, nitems, maxitems; 8-aligned).
const DSM_ITEMS_OFFSET: usize = 16;
/// Size of `dsm_control_item` on 64-bit PostgreSQL 13+: handle, refcnt, first_page,
/// npages, impl_private_pm_handle, pinned (padded to 8).
const DSM_ITEM_SIZE: usize = 40;

/// Removes the leftover shared memory recorded in `<data_dir>/postmaster.pid`, if the
/// server that created it is dead and nothing is attached. Best effort; never fails.
pub(crate) fn release(data_dir: &Path) {
    let Ok(text) = std::fs::read_to_string(data_dir.join("postmaster.pid")) else {
        return;
    };
    let lines: Vec<&str> = text.lines().collect();
    let Some(pid) = lines.first().and_then(|l| l.trim().parse::<i32>().ok()) else {
        return;
    };
    if proctree::is_alive(pid) && proctree::looks_like_postgres(pid) {
        return;
    }
    let Some(shmid) = lines
        .get(6)
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<i32>().ok())
    else {
        return;
    };
    let Ok(meta) = std::fs::metadata(data_dir) else {
        return;
    };
    // SAFETY: shmid_ds is plain old data, filled in by IPC_STAT.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: ds is a valid out-pointer.
    if unsafe { libc::shmctl(shmid, libc::IPC_STAT, &mut ds) } != 0 {
        return;
    }
    if ds.shm_nattch != 0 || ds.shm_segsz < 56 {
        return;
    }
    // SAFETY: attaching read-only; the segment is at least 56 bytes (checked above).
    let addr = unsafe { libc::shmat(shmid, std::ptr::null(), libc::SHM_RDONLY) };
    if addr as isize == -1 {
        return;
    }
    // PGShmemHeader on 64-bit Linux: int32 magic @0, pid_t creatorPID @4, Size totalsize @8,
    // Size freeoffset @16, uint32 dsm_control @24, void *index @32, dev_t device @40,
    // ino_t inode @48.
    let base = addr as *const u8;
    // SAFETY: all reads are within the first 56 bytes of the attached segment.
    let (magic, dsm_control, device, inode) = unsafe {
        (
            std::ptr::read_unaligned(base as *const i32),
            std::ptr::read_unaligned(base.add(24) as *const u32),
            std::ptr::read_unaligned(base.add(40) as *const u64),
            std::ptr::read_unaligned(base.add(48) as *const u64),
        )
    };
    // SAFETY: addr came from shmat above.
    unsafe { libc::shmdt(addr) };
    if cfg!(target_pointer_width = "64")
        && magic == PG_SHMEM_MAGIC
        && device == meta.dev()
        && inode == meta.ino()
    {
        // SAFETY: IPC_RMID ignores the buffer argument.
        unsafe { libc::shmctl(shmid, libc::IPC_RMID, std::ptr::null_mut()) };
        if dsm_control != 0 {
            release_posix_dsm(dsm_control);
        }
    }
}

/// How many processes are attached to System V segment `shmid`: `None` if there is no such
/// segment (removed, or never made).
pub(crate) fn attached(shmid: i32) -> Option<u64> {
    // SAFETY: shmid_ds is plain old data, filled in by IPC_STAT.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: ds is a valid out-pointer.
    if unsafe { libc::shmctl(shmid, libc::IPC_STAT, &mut ds) } != 0 {
        return None;
    }
    Some(ds.shm_nattch as u64)
}

/// Unlinks the POSIX dynamic shared memory segments listed in control segment `handle`, then
/// the control segment itself (what PostgreSQL's `dsm_cleanup_using_control_segment` does).
fn release_posix_dsm(handle: u32) {
    let path = |h: u32| format!("/dev/shm/PostgreSQL.{h}");
    let control = path(handle);
    if let Ok(bytes) = std::fs::read(&control) {
        let word = |at: usize| {
            bytes
                .get(at..at + 4)
                .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
        };
        if word(0) == Some(DSM_CONTROL_MAGIC)
            && let Some(nitems) = word(4)
        {
            for i in 0..nitems as usize {
                let at = DSM_ITEMS_OFFSET + i * DSM_ITEM_SIZE;
                let (Some(item), Some(refcnt)) = (word(at), word(at + 4)) else {
                    break;
                };
                // refcnt 0 means the slot is free; handle 0 is never used for segments.
                if refcnt != 0 && item != 0 && item != handle {
                    let _ = std::fs::remove_file(path(item));
                }
            }
        }
    }
    let _ = std::fs::remove_file(control);
}
