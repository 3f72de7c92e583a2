//! Unit tests of `persistent.rs` and `persistent/`.

use super::*;

#[test]
fn shell_quoting_survives_quotes() {
    assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    assert_eq!(shell_quote("listen_addresses="), "'listen_addresses='");
}

#[test]
fn relative_roots_are_made_absolute() {
    let cluster = PersistentCluster::new("some/dir");
    assert!(cluster.root().is_absolute());
    assert!(cluster.root().ends_with("some/dir"));
    assert_eq!(cluster.port(), DEFAULT_PORT);
    assert_eq!(cluster.with_port(6000).port(), 6000);
}
