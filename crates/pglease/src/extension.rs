//! Our SQL extensions, described once: name, schema, version, control file, the extensions each
//! requires, its installer lock and its embedded scripts ([`Extension`]; pg_lease is [`PG_LEASE`]).
//! How they get into a database is `install.rs`.

/// One script file of an extension, embedded from `extensions/<name>/sql/` (the very files
/// `CREATE EXTENSION` runs, never copies): an install script (`<name>--<to>.sql`) or an upgrade
/// script (`<name>--<from>--<to>.sql`).
///
/// # Examples
///
/// ```
/// for script in pglease::PG_LEASE.scripts {
///     println!("{:?} -> {}: {}", script.from, script.to, script.file);
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The version this script upgrades from; `None` for an install script.
    pub from: Option<&'static str>,
    /// The version the database is at after this script.
    pub to: &'static str,
    /// The script's file name in `extensions/<name>/sql/` (what `make install` ships).
    pub file: &'static str,
    /// The script itself.
    pub script: &'static str,
}

/// One of our SQL extensions, as the installers need to know it.
///
/// The scripts are those of the extension's `sql/` directory: the install script of the current
/// [`version`](Self::version) (produced from the one current source `sql/<name>.sql`), the install
/// script of the first release (kept so that older versions can be installed and upgraded, as the
/// upgrade tests do), and one upgrade script per release since.
///
/// # Examples
///
/// ```
/// let ext = &pglease::PG_LEASE;
/// assert_eq!((ext.name, ext.schema), ("pg_lease", "lease"));
/// assert_eq!(ext.install_script().to, ext.version);
/// ```
#[derive(Debug)]
pub struct Extension {
    /// The extension's name (`CREATE EXTENSION <name>`), also its directory under `extensions/`.
    pub name: &'static str,
    /// The schema it creates and owns (the control file's `schema`; not relocatable).
    pub schema: &'static str,
    /// The version this library speaks and installs (the control file's `default_version`).
    pub version: &'static str,
    /// The control file, `extensions/<name>/<name>.control` (for tools that install the files).
    pub control: &'static str,
    /// The extensions this one requires (the control file's `requires`), installed before it.
    pub requires: &'static [&'static Extension],
    /// The key of the transaction-scoped advisory lock (`pg_advisory_xact_lock(bigint)`) that
    /// serialises installers of this extension.
    pub lock_key: i64,
    /// Every script file of the extension, install scripts and the upgrade chain, in version order.
    pub scripts: &'static [Migration],
}

/// pg_lease, schema `lease`: leases with fencing epochs.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::PG_LEASE.control_file(), "pg_lease.control");
/// assert!(pglease::PG_LEASE.requires.is_empty());
/// ```
pub const PG_LEASE: Extension = Extension {
    name: "pg_lease",
    schema: "lease",
    version: "0.10.0",
    control: include_str!("../extensions/pg_lease/pg_lease.control"),
    requires: &[],
    lock_key: i64::from_be_bytes(*b"pg_lease"),
    scripts: &[
        Migration {
            from: None,
            to: "0.1.0",
            file: "pg_lease--0.1.0.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.1.0.sql"),
        },
        Migration {
            from: Some("0.1.0"),
            to: "0.2.0",
            file: "pg_lease--0.1.0--0.2.0.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.1.0--0.2.0.sql"),
        },
        Migration {
            from: Some("0.2.0"),
            to: "0.3.0",
            file: "pg_lease--0.2.0--0.3.0.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.2.0--0.3.0.sql"),
        },
        Migration {
            from: Some("0.3.0"),
            to: "0.4.0",
            file: "pg_lease--0.3.0--0.4.0.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.3.0--0.4.0.sql"),
        },
        Migration {
            from: Some("0.4.0"),
            to: "0.5.0",
            file: "pg_lease--0.4.0--0.5.0.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.4.0--0.5.0.sql"),
        },
        Migration {
            from: Some("0.5.0"),
            to: "0.6.0",
            file: "pg_lease--0.5.0--0.6.0.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.5.0--0.6.0.sql"),
        },
        Migration {
            from: Some("0.6.0"),
            to: "0.7.0",
            file: "pg_lease--0.6.0--0.7.0.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.6.0--0.7.0.sql"),
        },
        Migration {
            from: Some("0.7.0"),
            to: "0.7.1",
            file: "pg_lease--0.7.0--0.7.1.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.7.0--0.7.1.sql"),
        },
        Migration {
            from: Some("0.7.1"),
            to: "0.8.0",
            file: "pg_lease--0.7.1--0.8.0.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.7.1--0.8.0.sql"),
        },
        Migration {
            from: Some("0.8.0"),
            to: "0.9.0",
            file: "pg_lease--0.8.0--0.9.0.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.8.0--0.9.0.sql"),
        },
        Migration {
            from: Some("0.9.0"),
            to: "0.10.0",
            file: "pg_lease--0.9.0--0.10.0.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.9.0--0.10.0.sql"),
        },
        Migration {
            from: None,
            to: "0.10.0",
            file: "pg_lease--0.10.0.sql",
            script: include_str!("../extensions/pg_lease/sql/pg_lease--0.10.0.sql"),
        },
    ],
};

/// pg_lease_queue: the ordered, partitioned, lease-fenced work queue (schema `lease_queue`), which
/// requires pg_lease. The contract is docs/QUEUE.md.
pub const PG_LEASE_QUEUE: Extension = Extension {
    name: "pg_lease_queue",
    schema: "lease_queue",
    version: "0.3.1",
    control: include_str!("../extensions/pg_lease_queue/pg_lease_queue.control"),
    requires: &[&PG_LEASE],
    lock_key: i64::from_be_bytes(*b"pglqueue"),
    scripts: &[
        Migration {
            from: None,
            to: "0.1.0",
            file: "pg_lease_queue--0.1.0.sql",
            script: include_str!("../extensions/pg_lease_queue/sql/pg_lease_queue--0.1.0.sql"),
        },
        Migration {
            from: Some("0.1.0"),
            to: "0.1.1",
            file: "pg_lease_queue--0.1.0--0.1.1.sql",
            script: include_str!(
                "../extensions/pg_lease_queue/sql/pg_lease_queue--0.1.0--0.1.1.sql"
            ),
        },
        Migration {
            from: Some("0.1.1"),
            to: "0.2.0",
            file: "pg_lease_queue--0.1.1--0.2.0.sql",
            script: include_str!(
                "../extensions/pg_lease_queue/sql/pg_lease_queue--0.1.1--0.2.0.sql"
            ),
        },
        Migration {
            from: Some("0.2.0"),
            to: "0.3.0",
            file: "pg_lease_queue--0.2.0--0.3.0.sql",
            script: include_str!(
                "../extensions/pg_lease_queue/sql/pg_lease_queue--0.2.0--0.3.0.sql"
            ),
        },
        Migration {
            from: Some("0.3.0"),
            to: "0.3.1",
            file: "pg_lease_queue--0.3.0--0.3.1.sql",
            script: include_str!(
                "../extensions/pg_lease_queue/sql/pg_lease_queue--0.3.0--0.3.1.sql"
            ),
        },
        Migration {
            from: None,
            to: "0.3.1",
            file: "pg_lease_queue--0.3.1.sql",
            script: include_str!("../extensions/pg_lease_queue/sql/pg_lease_queue--0.3.1.sql"),
        },
    ],
};

/// Every extension of this library, each after the extensions it requires.
///
/// # Examples
///
/// ```
/// for ext in pglease::EXTENSIONS {
///     assert!(ext.requires.iter().all(|r| pglease::EXTENSIONS.iter()
///         .position(|e| e.name == r.name) < pglease::EXTENSIONS.iter().position(|e| e.name == ext.name)));
/// }
/// ```
pub const EXTENSIONS: &[&Extension] = &[&PG_LEASE, &PG_LEASE_QUEUE];

/// pg_lease's script files ([`PG_LEASE`]`.scripts`): install scripts and the upgrade chain.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::MIGRATIONS[0].from, None);
/// assert_eq!(pglease::MIGRATIONS.last().unwrap().to, pglease::VERSION);
/// ```
pub const MIGRATIONS: &[Migration] = PG_LEASE.scripts;

/// pg_lease's control file, `extensions/pg_lease/pg_lease.control` ([`PG_LEASE`]`.control`).
///
/// # Examples
///
/// ```
/// assert!(pglease::CONTROL.contains("default_version"));
/// ```
pub const CONTROL: &str = PG_LEASE.control;

/// The version of pg_lease's SQL API that this library speaks and installs
/// ([`PG_LEASE`]`.version`).
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::VERSION, "0.10.0");
/// ```
pub const VERSION: &str = PG_LEASE.version;

/// The key of pg_lease's installer lock ([`PG_LEASE`]`.lock_key`): the bytes `pg_lease` read as a
/// big-endian `i64`.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::LOCK_KEY.to_be_bytes(), *b"pg_lease");
/// ```
pub const LOCK_KEY: i64 = PG_LEASE.lock_key;

/// A line that marks the next statement as one for `CREATE EXTENSION` only; the script installer
/// drops it and the statement (through the next line ending with `;`).
const EXTENSION_ONLY: &str = "-- pglease:extension-only";

impl Extension {
    /// The control file's name, `<name>.control`.
    pub fn control_file(&self) -> String {
        format!("{}.control", self.name)
    }

    /// The install script of [`version`](Self::version): what a fresh installation runs.
    ///
    /// # Panics
    ///
    /// Never for the extensions of this library (a unit test checks each has one).
    pub fn install_script(&self) -> &'static Migration {
        self.scripts
            .iter()
            .find(|m| m.from.is_none() && m.to == self.version)
            .expect("every extension has an install script of its current version")
    }

    /// The released versions, oldest first: the first install script's, then each upgrade's.
    pub fn versions(&self) -> Vec<&'static str> {
        let mut versions: Vec<&'static str> = Vec::new();
        for m in self.scripts {
            if !versions.contains(&m.to) {
                versions.push(m.to);
            }
        }
        versions
    }

    /// The scripts that bring a database from `version` (`None`: nothing installed) to
    /// [`version`](Self::version), in order, or `None` if no chain leads from `version`.
    pub(crate) fn steps_after(&self, version: Option<&str>) -> Option<Vec<&'static Migration>> {
        let Some(mut at) = version else {
            return Some(vec![self.install_script()]);
        };
        let mut steps = Vec::new();
        while at != self.version {
            let step = self.scripts.iter().find(|m| m.from == Some(at))?;
            steps.push(step);
            at = step.to;
        }
        Some(steps)
    }

    /// This extension after everything it requires (each once), in installation order.
    pub(crate) fn with_requirements(&'static self) -> Vec<&'static Extension> {
        fn visit(ext: &'static Extension, out: &mut Vec<&'static Extension>) {
            for req in ext.requires {
                visit(req, out);
            }
            if !out.iter().any(|e| e.name == ext.name) {
                out.push(ext);
            }
        }
        let mut out = Vec::new();
        visit(self, &mut out);
        out
    }

    /// `script` as the script installer runs it: `\echo` lines and the statements after
    /// `-- pglease:extension-only` dropped, `@extowner@` and `@extschema@` substituted.
    ///
    /// `extowner` must already be a quoted identifier (`quote_ident(current_user)`).
    pub(crate) fn transform(&self, script: &str, extowner: &str) -> String {
        let mut out = String::with_capacity(script.len());
        let mut skipping = false;
        for line in script.split_inclusive('\n') {
            let content = line.trim_end();
            if skipping {
                skipping = !content.ends_with(';');
            } else if content.trim_start() == EXTENSION_ONLY {
                skipping = true;
            } else if !line.starts_with("\\echo") {
                out.push_str(line);
            }
        }
        out.replace("@extowner@", extowner)
            .replace("@extschema@", self.schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The install script of the current version.
    const SCRIPT: &str = include_str!("../extensions/pg_lease/sql/pg_lease--0.10.0.sql");

    pub(crate) fn transform(script: &str, extowner: &str) -> String {
        PG_LEASE.transform(script, extowner)
    }

    #[test]
    fn the_script_under_test_is_the_install_script() {
        assert_eq!(SCRIPT, PG_LEASE.install_script().script);
    }

    #[test]
    fn transformed_script_has_no_extension_only_parts() {
        let out = transform(SCRIPT, "\"Some Role\"");
        assert!(!out.contains("pg_extension_config_dump("));
        assert!(!out.lines().any(|l| l.starts_with("\\echo")));
        assert!(!out.contains("\\quit"));
        // (The script uses the operator `<@`; a placeholder is `@word@`.)
        let placeholder = out.match_indices('@').any(|(at, _)| {
            let word: String = out[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            !word.is_empty() && out[at + 1 + word.len()..].starts_with('@')
        });
        assert!(!placeholder, "an unsubstituted @...@ remains");
        assert!(!out.lines().any(|l| l.trim() == EXTENSION_ONLY));
        assert!(out.contains(
            "GRANT EXECUTE ON FUNCTION lease.purge(interval) TO \"Some Role\" WITH GRANT OPTION;"
        ));
    }

    #[test]
    fn transformation_keeps_everything_else() {
        let out = transform(SCRIPT, "owner");
        for kept in [
            "CREATE TABLE lease.leases (",
            "INSERT INTO lease.epoch_floor (floor, sentinel) VALUES (0, true);",
            "REVOKE ALL ON TABLE lease.leases FROM PUBLIC;",
            "CREATE FUNCTION lease.acquire(",
            "CREATE FUNCTION lease.version()",
            "GRANT USAGE ON SCHEMA lease TO PUBLIC;",
        ] {
            assert!(out.contains(kept), "{kept}");
        }
        // Only the marked statements and the \echo line go: the rest is line-for-line identical.
        let dropped = SCRIPT.lines().count() - out.lines().count();
        let markers = SCRIPT
            .lines()
            .filter(|l| l.trim() == EXTENSION_ONLY)
            .count();
        assert_eq!(markers, 4);
        assert_eq!(dropped, 1 + 2 * markers);
    }

    #[test]
    fn marker_drops_a_multi_line_statement_through_its_semicolon() {
        let script =
            "\\echo no\nA;\n-- pglease:extension-only\nB(\n  x);  \nC @extschema@ @extowner@;\n";
        assert_eq!(transform(script, "o"), "A;\nC lease o;\n");
    }

    #[test]
    fn marker_at_the_end_and_crlf_lines() {
        assert_eq!(
            transform("A;\r\n-- pglease:extension-only\r\n", "o"),
            "A;\r\n"
        );
        assert_eq!(
            transform("-- pglease:extension-only\r\nB;\r\nC;\r\n", "o"),
            "C;\r\n"
        );
    }

    /// The directory of an extension's files in this repository.
    fn dir_of(ext: &Extension) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../extensions")
            .join(ext.name)
    }

    #[test]
    fn the_chain_is_linear_and_ends_at_the_control_files_version() {
        for ext in EXTENSIONS {
            let upgrades: Vec<&Migration> =
                ext.scripts.iter().filter(|m| m.from.is_some()).collect();
            for pair in upgrades.windows(2) {
                assert_eq!(
                    pair[1].from,
                    Some(pair[0].to),
                    "each step starts where the last ended"
                );
            }
            let first = ext.scripts[0];
            assert_eq!(first.from, None, "{}: the first script installs", ext.name);
            if let Some(first_upgrade) = upgrades.first() {
                assert_eq!(first_upgrade.from, Some(first.to));
                assert_eq!(upgrades.last().unwrap().to, ext.version);
            }
            assert_eq!(ext.install_script().to, ext.version);
            for m in ext.scripts {
                let expected = match m.from {
                    None => format!("{}--{}.sql", ext.name, m.to),
                    Some(from) => format!("{}--{from}--{}.sql", ext.name, m.to),
                };
                assert_eq!(m.file, expected);
                assert!(
                    m.script.contains(&format!("SELECT '{}'::text", m.to)),
                    "{} sets {}.version()",
                    m.file,
                    ext.schema
                );
            }
            assert!(
                ext.control
                    .contains(&format!("default_version = '{}'", ext.version))
            );
            assert!(ext.control.contains(&format!("schema = {}", ext.schema)));
            let requires: Vec<&str> = ext.requires.iter().map(|r| r.name).collect();
            let declared = ext
                .control
                .lines()
                .find_map(|l| l.strip_prefix("requires = "))
                .map(|v| v.trim_matches('\'').split(',').map(str::trim).collect())
                .unwrap_or_else(Vec::new);
            assert_eq!(requires, declared, "{}: requires", ext.name);
        }
    }

    #[test]
    fn every_script_in_the_sql_directory_is_embedded() {
        for ext in EXTENSIONS {
            let mut on_disk: Vec<String> = std::fs::read_dir(dir_of(ext).join("sql"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.starts_with(&format!("{}--", ext.name)) && n.ends_with(".sql"))
                .collect();
            on_disk.sort();
            let mut embedded: Vec<String> = ext.scripts.iter().map(|m| m.file.to_owned()).collect();
            embedded.sort();
            assert_eq!(on_disk, embedded, "{}", ext.name);
        }
    }

    #[test]
    fn the_install_script_of_the_current_version_is_the_current_source() {
        for ext in EXTENSIONS {
            let source = dir_of(ext).join(format!("sql/{}.sql", ext.name));
            let source = std::fs::read_to_string(&source)
                .unwrap_or_else(|e| panic!("{}: {e}", source.display()));
            assert!(
                source == ext.install_script().script,
                "{} differs from sql/{}.sql: run `make -C extensions/{}` and commit the result",
                ext.install_script().file,
                ext.name,
                ext.name
            );
        }
    }

    #[test]
    fn steps_after_a_version_are_the_rest_of_the_chain() {
        let files = |v: Option<&str>| -> Option<Vec<&str>> {
            PG_LEASE
                .steps_after(v)
                .map(|s| s.iter().map(|m| m.file).collect())
        };
        assert_eq!(files(None).unwrap(), ["pg_lease--0.10.0.sql"]);
        assert!(files(Some(VERSION)).unwrap().is_empty());
        assert_eq!(
            files(Some("0.1.0")).unwrap(),
            [
                "pg_lease--0.1.0--0.2.0.sql",
                "pg_lease--0.2.0--0.3.0.sql",
                "pg_lease--0.3.0--0.4.0.sql",
                "pg_lease--0.4.0--0.5.0.sql",
                "pg_lease--0.5.0--0.6.0.sql",
                "pg_lease--0.6.0--0.7.0.sql",
                "pg_lease--0.7.0--0.7.1.sql",
                "pg_lease--0.7.1--0.8.0.sql",
                "pg_lease--0.8.0--0.9.0.sql",
                "pg_lease--0.9.0--0.10.0.sql"
            ]
        );
        assert_eq!(
            files(Some("0.3.0")).unwrap(),
            [
                "pg_lease--0.3.0--0.4.0.sql",
                "pg_lease--0.4.0--0.5.0.sql",
                "pg_lease--0.5.0--0.6.0.sql",
                "pg_lease--0.6.0--0.7.0.sql",
                "pg_lease--0.7.0--0.7.1.sql",
                "pg_lease--0.7.1--0.8.0.sql",
                "pg_lease--0.8.0--0.9.0.sql",
                "pg_lease--0.9.0--0.10.0.sql"
            ]
        );
        assert!(files(Some("9.9.9")).is_none());
        assert_eq!(
            PG_LEASE.versions(),
            [
                "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.7.1", "0.8.0",
                "0.9.0", "0.10.0"
            ]
        );
    }

    #[test]
    fn the_queues_steps_after_a_version_are_the_rest_of_its_chain() {
        let files = |v: Option<&str>| -> Option<Vec<&str>> {
            PG_LEASE_QUEUE
                .steps_after(v)
                .map(|s| s.iter().map(|m| m.file).collect())
        };
        assert_eq!(files(None).unwrap(), ["pg_lease_queue--0.3.1.sql"]);
        assert!(files(Some(PG_LEASE_QUEUE.version)).unwrap().is_empty());
        assert_eq!(
            files(Some("0.1.0")).unwrap(),
            [
                "pg_lease_queue--0.1.0--0.1.1.sql",
                "pg_lease_queue--0.1.1--0.2.0.sql",
                "pg_lease_queue--0.2.0--0.3.0.sql",
                "pg_lease_queue--0.3.0--0.3.1.sql"
            ]
        );
        assert_eq!(
            files(Some("0.2.0")).unwrap(),
            [
                "pg_lease_queue--0.2.0--0.3.0.sql",
                "pg_lease_queue--0.3.0--0.3.1.sql"
            ]
        );
        assert_eq!(
            PG_LEASE_QUEUE.versions(),
            ["0.1.0", "0.1.1", "0.2.0", "0.3.0", "0.3.1"]
        );
    }

    #[test]
    fn names_are_plain_identifiers_and_lock_keys_distinct() {
        for ext in EXTENSIONS {
            for name in [ext.name, ext.schema] {
                assert!(
                    !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit()),
                    "{name} needs no quoting"
                );
            }
            let same_key = EXTENSIONS
                .iter()
                .filter(|e| e.lock_key == ext.lock_key)
                .count();
            assert_eq!(same_key, 1, "{}: its own lock key", ext.name);
        }
    }

    #[test]
    fn requirements_come_first() {
        let order: Vec<&str> = PG_LEASE
            .with_requirements()
            .iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(order, ["pg_lease"]);
    }

    #[test]
    fn lock_key_spells_pg_lease() {
        assert_eq!(LOCK_KEY.to_be_bytes(), *b"pg_lease");
    }
}
