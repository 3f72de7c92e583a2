use pgcluster::{ClusterBuilder, ExtensionFiles};

use crate::common::{pg15, write_probe_extension};

#[tokio::test]
async fn extension_files_are_installed_and_usable() {
    let dir = tempfile::tempdir().unwrap();
    let (control, sql) = write_probe_extension(dir.path(), "pgcluster_probe");
    let cluster = ClusterBuilder::new(pg15())
        .extension_files(&control, [&sql])
        .start()
        .unwrap();
    let ext_dir = cluster.server_installation().sharedir().join("extension");
    assert!(ext_dir.join("pgcluster_probe.control").is_file());
    assert!(ext_dir.join("pgcluster_probe--1.0.sql").is_file());
    let client = cluster.connect("postgres").await.unwrap();
    client
        .batch_execute("CREATE EXTENSION pgcluster_probe")
        .await
        .unwrap();
    let answer: i32 = client
        .query_one("SELECT pgcluster_probe_answer()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(answer, 42);
}

#[tokio::test]
async fn private_mirror_serves_extension_without_touching_the_installation() {
    let files = tempfile::tempdir().unwrap();
    write_probe_extension(files.path(), "pgcluster_mirror_probe");
    let cache = tempfile::tempdir().unwrap();
    let inst = pg15();
    let cluster = ClusterBuilder::new(inst.clone())
        .extension_dir(files.path())
        .private_mirror(true)
        .cache_dir(cache.path())
        .start()
        .unwrap();
    let server = cluster.server_installation();
    assert!(server.bindir().starts_with(cache.path()), "{server:?}");
    assert!(
        !inst
            .sharedir()
            .join("extension/pgcluster_mirror_probe.control")
            .exists(),
        "the real installation must not be modified"
    );
    let client = cluster.connect("postgres").await.unwrap();
    client
        .batch_execute(
            "CREATE EXTENSION pgcluster_mirror_probe; CREATE EXTENSION pg_stat_statements",
        )
        .await
        .unwrap();
    let answer: i32 = client
        .query_one("SELECT pgcluster_mirror_probe_answer()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(answer, 42);
    // The mirror is reused by the next cluster.
    let again = ClusterBuilder::new(inst)
        .extension_dir(files.path())
        .private_mirror(true)
        .cache_dir(cache.path())
        .start()
        .unwrap();
    assert_eq!(again.server_installation().bindir(), server.bindir());
}

#[test]
fn extension_dir_without_control_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = ClusterBuilder::new(pg15())
        .extension_dir(dir.path())
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("control"), "{err}");
}

#[tokio::test]
async fn extension_files_in_memory_are_installed_and_usable() {
    let files = ExtensionFiles::new(
        "pgcluster_memory_probe.control",
        "comment = 'pgcluster test probe'\ndefault_version = '1.0'\nrelocatable = true\ntrusted = true\n",
    )
    .script(
        "pgcluster_memory_probe--1.0.sql",
        "CREATE FUNCTION pgcluster_memory_probe_answer() RETURNS int LANGUAGE sql AS 'SELECT 42';\n",
    );
    let cluster = ClusterBuilder::new(pg15())
        .extension(files.clone())
        .start()
        .unwrap();
    let ext_dir = cluster.server_installation().sharedir().join("extension");
    for (name, text) in files.files() {
        assert_eq!(std::fs::read_to_string(ext_dir.join(name)).unwrap(), text);
    }
    let client = cluster.connect("postgres").await.unwrap();
    client
        .batch_execute("CREATE EXTENSION pgcluster_memory_probe")
        .await
        .unwrap();
    let answer: i32 = client
        .query_one("SELECT pgcluster_memory_probe_answer()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(answer, 42);
}

#[test]
fn an_extension_directory_reads_as_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let (control, sql) = write_probe_extension(dir.path(), "pgcluster_read_probe");
    let files = ExtensionFiles::from_dir(dir.path()).unwrap();
    assert_eq!(files.control_name(), "pgcluster_read_probe.control");
    let read: Vec<(String, String)> = files
        .files()
        .map(|(n, t)| (n.to_owned(), t.to_owned()))
        .collect();
    let expected: Vec<(String, String)> = [control, sql]
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(p).unwrap())
        })
        .collect();
    assert_eq!(read, expected);

    std::fs::write(
        dir.path().join("second.control"),
        "default_version = '1.0'\n",
    )
    .unwrap();
    let err = ExtensionFiles::from_dir(dir.path()).unwrap_err();
    assert!(err.to_string().contains("control"), "{err}");
}
