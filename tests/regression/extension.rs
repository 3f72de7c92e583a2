//! The extension's life cycle: version, DROP/CREATE, PGXS install, and dump/restore keeping epochs.

use std::process::Command;

use pglease_tests::{ADMIN, APP, repo_root, server};

use crate::{grant, inspect, release};

#[tokio::test]
async fn installed_version_matches_the_control_file() {
    let s = server();
    let db = s.fresh_db_with_extension("version");
    let c = s.connect_as(&db, APP).await;
    let row = c
        .query_one(
            "SELECT lease.version(), (SELECT extversion FROM pg_extension WHERE extname = 'pg_lease')",
            &[],
        )
        .await
        .unwrap();
    let (sql_version, ext_version): (String, String) = (row.get(0), row.get(1));
    let control =
        std::fs::read_to_string(repo_root().join("extensions/pg_lease/pg_lease.control")).unwrap();
    assert!(control.contains(&format!("default_version = '{ext_version}'")));
    assert_eq!(sql_version, ext_version);
}

#[tokio::test]
async fn drop_and_create_extension_starts_every_key_fresh_at_epoch_one() {
    let s = server();
    let db = s.fresh_db_with_extension("recreate");
    let admin = s.connect_as(&db, ADMIN).await;
    for _ in 0..3 {
        let e = grant(&admin, "k", "w", "1 hour").await;
        release(&admin, "k", "w", e).await;
    }
    assert_eq!(inspect(&admin, "k").await.unwrap().2, 6);
    admin
        .batch_execute("DROP EXTENSION pg_lease; CREATE EXTENSION pg_lease;")
        .await
        .unwrap();
    assert_eq!(
        inspect(&admin, "k").await,
        None,
        "all lease state went with the extension"
    );
    assert_eq!(grant(&admin, "k", "w", "1 hour").await, 1);
}

#[test]
fn pgxs_make_install_puts_the_files_where_postgresql_looks() {
    let s = server();
    let bindir = s.cluster().installation().bindir().to_path_buf();
    let pg_config = bindir.join("pg_config");
    let sharedir = String::from_utf8(
        Command::new(&pg_config)
            .arg("--sharedir")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let staging = tempfile_dir("pgxs");
    let out = Command::new("make")
        .arg("-C")
        .arg(repo_root().join("extensions/pg_lease"))
        .arg("install")
        .arg(format!("PG_CONFIG={}", pg_config.display()))
        .arg(format!("DESTDIR={}", staging.display()))
        .output()
        .expect("make is installed");
    assert!(
        out.status.success(),
        "make install failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ext_dir = staging
        .join(sharedir.trim().trim_start_matches('/'))
        .join("extension");
    let files =
        std::iter::once("pg_lease.control").chain(pglease::MIGRATIONS.iter().map(|m| m.file));
    for f in files {
        let installed =
            std::fs::read(ext_dir.join(f)).unwrap_or_else(|e| panic!("{f} not installed: {e}"));
        let source = if f.ends_with(".control") {
            repo_root().join("extensions/pg_lease").join(f)
        } else {
            repo_root().join("extensions/pg_lease/sql").join(f)
        };
        assert_eq!(
            installed,
            std::fs::read(source).unwrap(),
            "{f} installed as is"
        );
    }
    std::fs::remove_dir_all(&staging).unwrap();
}

#[tokio::test]
async fn dump_and_restore_keeps_epochs_and_the_epoch_floor() {
    let s = server();
    let db = s.fresh_db_with_extension("dump_src");
    let admin = s.connect_as(&db, ADMIN).await;
    for _ in 0..4 {
        let e = grant(&admin, "purged", "w", "1 hour").await;
        release(&admin, "purged", "w", e).await;
    }
    assert_eq!(
        admin
            .query_one("SELECT lease.purge('0')", &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        1
    );
    let e = grant(&admin, "kept", "w", "1 hour").await;
    release(&admin, "kept", "w", e).await; // kept: counter 10

    let restored = s.fresh_db("dump_dst");
    let bindir = s.cluster().installation().bindir().to_path_buf();
    let archive = tempfile_dir("dump").join("lease.dump");
    let socket = s.cluster().socket_dir().display().to_string();
    let port = s.cluster().port().to_string();
    let dump = Command::new(bindir.join("pg_dump"))
        .args(["-h", &socket, "-p", &port, "-U", "postgres", "-Fc", "-f"])
        .arg(&archive)
        .arg(&db)
        .output()
        .unwrap();
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let restore = Command::new(bindir.join("pg_restore"))
        .args([
            "-h",
            &socket,
            "-p",
            &port,
            "-U",
            "postgres",
            "--no-owner",
            "--exit-on-error",
            "-d",
            &restored,
        ])
        .arg(&archive)
        .output()
        .unwrap();
    assert!(
        restore.status.success(),
        "{}",
        String::from_utf8_lossy(&restore.stderr)
    );
    std::fs::remove_dir_all(archive.parent().unwrap()).unwrap();

    let c = s.connect_as(&restored, APP).await;
    assert_eq!(
        inspect(&c, "kept").await,
        Some((false, None, 10, None)),
        "row and counter restored"
    );
    assert_eq!(grant(&c, "kept", "w", "1 hour").await, 11);
    assert_eq!(
        grant(&c, "purged", "w", "1 hour").await,
        9,
        "floor restored: above the purged counter 8"
    );
}

fn tempfile_dir(label: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pglease-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
