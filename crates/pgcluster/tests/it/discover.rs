use crate::common::pg15;

#[test]
fn discovery_finds_postgresql_15() {
    let found = pgcluster::discover().unwrap();
    let majors: Vec<u32> = found.iter().map(|i| i.major()).collect();
    assert!(majors.contains(&15), "discovered majors: {majors:?}");
    let mut sorted = majors.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(majors, sorted, "sorted by major, one per major");
    for inst in &found {
        assert!(inst.bin("postgres").is_file());
        assert!(inst.sharedir().join("postgres.bki").is_file());
        assert!(inst.pkglibdir().is_dir());
    }
}

#[test]
fn find_and_ensure_agree_for_15() {
    let found = pgcluster::find(15).unwrap().expect("15 found");
    let ensured = pg15();
    assert_eq!(found, ensured);
    assert_eq!(ensured.version().major, 15);
    assert!(pgcluster::find(9).unwrap().is_none());
}

#[test]
fn explicit_bindir_is_inspected() {
    let inst = pg15();
    let explicit = pgcluster::Installation::from_bindir(inst.bindir()).unwrap();
    assert_eq!(explicit.version(), inst.version());
    assert_eq!(explicit.source(), pgcluster::Source::Explicit);
    let err = pgcluster::Installation::from_bindir("/nonexistent/bin").unwrap_err();
    assert!(
        matches!(err, pgcluster::Error::InvalidInstallation { .. }),
        "{err}"
    );
}
