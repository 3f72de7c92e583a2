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
    for ext in pglease::EXTENSIONS {
        let staging = tempfile_dir(&format!("pgxs-{}", ext.name));
        let dir = repo_root().join("extensions").join(ext.name);
        let out = Command::new("make")
            .arg("-C")
            .arg(&dir)
            .arg("install")
            .arg(format!("PG_CONFIG={}", pg_config.display()))
            .arg(format!("DESTDIR={}", staging.display()))
            .output()
            .expect("make is installed");
        assert!(
            out.status.success(),
            "make install of {} failed:\n{}",
            ext.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let ext_dir = staging
            .join(sharedir.trim().trim_start_matches('/'))
            .join("extension");
        let control = ext.control_file();
        let files = std::iter::once(control.as_str()).chain(ext.scripts.iter().map(|m| m.file));
        let mut installed_files = 0;
        for f in files {
            let installed =
                std::fs::read(ext_dir.join(f)).unwrap_or_else(|e| panic!("{f} not installed: {e}"));
            let source = if f.ends_with(".control") {
                dir.join(f)
            } else {
                dir.join("sql").join(f)
            };
            assert_eq!(
                installed,
                std::fs::read(source).unwrap(),
                "{f} installed as is"
            );
            installed_files += 1;
        }
        // Nothing else: no file of another extension, no stray script.
        assert_eq!(
            std::fs::read_dir(&ext_dir).unwrap().count(),
            installed_files,
            "{}: files in {}",
            ext.name,
            ext_dir.display()
        );
        std::fs::remove_dir_all(&staging).unwrap();
    }
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

pub(crate) fn tempfile_dir(label: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pglease-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a PostgreSQL client program of the server under test against it, as `role`; panics with
/// its stderr if it fails. `stdin`: fed to the program.
pub(crate) fn run_client_program(
    program: &str,
    role: &str,
    args: &[&str],
    stdin: Option<Vec<u8>>,
) -> Vec<u8> {
    use std::io::Write as _;
    let s = server();
    let bindir = s.cluster().installation().bindir().to_path_buf();
    let socket = s.cluster().socket_dir().display().to_string();
    let port = s.cluster().port().to_string();
    let mut child = Command::new(bindir.join(program))
        .args(["-h", &socket, "-p", &port, "-U", role])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let mut input = child.stdin.take().unwrap();
    if let Some(bytes) = stdin {
        input.write_all(&bytes).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} as {role} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Leases, epochs and the floor in `db`: a key purged at counter 8, a free key at counter 10, and a
/// key held at epoch 9 (created after the purge: above the floor).
async fn make_lease_state(db: &str) {
    let admin = server().connect_as(db, ADMIN).await;
    for _ in 0..4 {
        let e = grant(&admin, "purged", "w", "1 hour").await;
        release(&admin, "purged", "w", e).await;
    }
    let purged: i64 = admin
        .query_one("SELECT lease.purge('0')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(purged, 1);
    let e = grant(&admin, "kept", "w", "1 hour").await;
    release(&admin, "kept", "w", e).await; // created at 9, counter 10
    assert_eq!(grant(&admin, "held", "w", "1 hour").await, 9);
    admin
        .batch_execute("SELECT lease.configure('2 hours')")
        .await
        .unwrap();
}

/// What [`make_lease_state`] made, as found in `db`.
async fn check_lease_state(db: &str, how: &str) {
    let c = server().connect_as(db, APP).await;
    // The history of grants is restored with the leases (a purged key's included).
    for (key, grants) in [
        (
            "purged",
            &["1 released", "3 released", "5 released", "7 released"][..],
        ),
        ("kept", &["9 released"][..]),
        ("held", &["9 held"][..]),
    ] {
        let history: Vec<String> = c
            .query(
                "SELECT format('%s %s', epoch, coalesce(ended_by, 'held')) FROM lease.history($1)",
                &[&key],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(history, grants, "{how}: the history of {key} restored");
    }
    assert_eq!(
        inspect(&c, "kept").await,
        Some((false, None, 10, None)),
        "{how}: row and counter restored"
    );
    let held = inspect(&c, "held").await.expect("held key restored");
    assert_eq!(
        (held.0, held.1.as_deref(), held.2),
        (true, Some("w"), 9),
        "{how}"
    );
    assert_eq!(grant(&c, "kept", "w", "1 hour").await, 11, "{how}");
    assert_eq!(
        grant(&c, "purged", "w", "1 hour").await,
        9,
        "{how}: floor restored, above the purged counter 8"
    );
    assert_eq!(
        pglease_tests::expect_error(&c, "SELECT lease.acquire('capped', 'w', '3 hours')")
            .await
            .code,
        "22023",
        "{how}: the ttl cap restored"
    );
}

#[tokio::test]
async fn the_installing_role_dumps_and_restores_its_own_database_with_every_lease_and_epoch() {
    let s = server();
    let src = s.fresh_db_with_extension("own_dump_src");
    make_lease_state(&src).await;
    let archive = tempfile_dir("own_dump").join("lease.dump");
    let archive_arg = archive.display().to_string();

    // Custom format, restored with pg_restore, as the installing role (owner of both databases).
    run_client_program("pg_dump", ADMIN, &["-Fc", "-f", &archive_arg, &src], None);
    let dst = s.fresh_db("own_dump_dst");
    run_client_program(
        "pg_restore",
        ADMIN,
        &[
            "--no-owner",
            "--no-privileges",
            "--exit-on-error",
            "-d",
            &dst,
            &archive_arg,
        ],
        None,
    );
    check_lease_state(&dst, "pg_dump -Fc | pg_restore, as the installing role").await;

    // Plain format through psql, stopping at the first error.
    let plain = run_client_program(
        "pg_dump",
        ADMIN,
        &["--no-owner", "--no-privileges", &src],
        None,
    );
    let dst = s.fresh_db("own_plain_dst");
    run_client_program(
        "psql",
        ADMIN,
        &["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &dst],
        Some(plain),
    );
    check_lease_state(&dst, "pg_dump | psql, as the installing role").await;

    // A superuser's dump, restored by the installing role.
    run_client_program(
        "pg_dump",
        "postgres",
        &["-Fc", "-f", &archive_arg, &src],
        None,
    );
    let dst = s.fresh_db("su_dump_dst");
    run_client_program(
        "pg_restore",
        ADMIN,
        &[
            "--no-owner",
            "--no-privileges",
            "--exit-on-error",
            "-d",
            &dst,
            &archive_arg,
        ],
        None,
    );
    check_lease_state(&dst, "a superuser's dump restored by the installing role").await;
    std::fs::remove_dir_all(archive.parent().unwrap()).unwrap();
}
