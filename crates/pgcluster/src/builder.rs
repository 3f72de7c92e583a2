//! Configuring and creating a private cluster.

use std::borrow::Cow;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cache::{self, cache_dir};
use crate::cluster::Cluster;
use crate::discover::ensure;
use crate::error::{Error, IoContext, Result};
use crate::extension::{self, ExtensionFiles};
use crate::install::Installation;
use crate::sweep::{DIR_PREFIX, KEEP_FILE, OWNER_FILE};
use crate::tls::ServerTls;
use crate::user::{self, ServerUser};
use crate::{mirror, registry, sweep};

/// Settings every cluster starts with unless overridden with [`ClusterBuilder::setting`].
const DEFAULT_SETTINGS: &[(&str, &str)] = &[
    ("max_connections", "100"),
    ("shared_buffers", "128MB"),
    ("log_min_messages", "warning"),
    ("fsync", "on"),
    ("synchronous_commit", "on"),
];

/// Builder for a [`Cluster`]: choose settings and extension files, then [`start`](Self::start).
#[derive(Clone, Debug)]
pub struct ClusterBuilder {
    installation: Installation,
    settings: Vec<(String, String)>,
    extensions: Vec<Extension>,
    initdb_args: Vec<String>,
    force_mirror: bool,
    cache_dir: Option<PathBuf>,
    tls: Option<ServerTls>,
    hba_rules: Vec<String>,
}

impl ClusterBuilder {
    /// Starts configuring a cluster that runs `installation`, with test-friendly defaults:
    /// `max_connections=100`, `shared_buffers=128MB`, `log_min_messages=warning`,
    /// `fsync=on`, `synchronous_commit=on`.
    pub fn new(installation: Installation) -> ClusterBuilder {
        ClusterBuilder {
            installation,
            settings: DEFAULT_SETTINGS
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            extensions: Vec::new(),
            initdb_args: Vec::new(),
            force_mirror: false,
            cache_dir: None,
            tls: None,
            hba_rules: Vec::new(),
        }
    }

    /// Like [`new`](Self::new) with the installation from [`crate::ensure`]`(major)`
    /// (found locally, else fetched from PyPI).
    pub fn for_major(major: u32) -> Result<ClusterBuilder> {
        ensure(major).map(ClusterBuilder::new)
    }

    /// Sets server parameter `name` to `value` (passed as `-c name=value`; replaces an
    /// earlier value). `port`, `listen_addresses` and `unix_socket_directories` are managed
    /// by the cluster and cannot be overridden.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> ClusterBuilder {
        let (name, value) = (name.into(), value.into());
        match self.settings.iter_mut().find(|(k, _)| *k == name) {
            Some(slot) => slot.1 = value,
            None => self.settings.push((name, value)),
        }
        self
    }

    /// Installs an extension whose files are in memory (e.g. embedded with `include_str!`) into
    /// the server's `<sharedir>/extension/` before start (see
    /// [`extension_dir`](Self::extension_dir) for how files are installed).
    pub fn extension(mut self, files: ExtensionFiles) -> ClusterBuilder {
        self.extensions.push(Extension::Files(files));
        self
    }

    /// Installs an extension's control file and SQL scripts, read from disk at
    /// [`start`](Self::start), into the server's `<sharedir>/extension/` (see
    /// [`extension_dir`](Self::extension_dir) for how files are installed).
    pub fn extension_files<P: AsRef<Path>>(
        mut self,
        control: impl AsRef<Path>,
        sql_files: impl IntoIterator<Item = P>,
    ) -> ClusterBuilder {
        self.extensions.push(Extension::Paths {
            control: control.as_ref().to_path_buf(),
            scripts: sql_files
                .into_iter()
                .map(|p| p.as_ref().to_path_buf())
                .collect(),
        });
        self
    }

    /// Installs the extension in `dir`: its `*.control` file and every `*.sql` of `dir` and
    /// `dir/sql/` (the pg_lease layout: `extensions/pg_lease/pg_lease.control`,
    /// `extensions/pg_lease/sql/pg_lease--0.1.0.sql`; see [`ExtensionFiles::from_dir`]).
    ///
    /// Files are copied atomically (temporary name, mode 0644, rename; identical files are left
    /// alone) into the installation's `<sharedir>/extension/`. If that directory is not writable
    /// (e.g. a non-root user with Debian's PostgreSQL), the server instead runs from a private
    /// mirror of the installation in the cache (see [`private_mirror`](Self::private_mirror)).
    /// [`start`](Self::start) fails if `dir` has no control file (or more than one).
    pub fn extension_dir(mut self, dir: impl AsRef<Path>) -> ClusterBuilder {
        self.extensions
            .push(Extension::Dir(dir.as_ref().to_path_buf()));
        self
    }

    /// Appends an extra argument to the `initdb` command line (e.g. `--data-checksums`).
    pub fn initdb_arg(mut self, arg: impl Into<String>) -> ClusterBuilder {
        self.initdb_args.push(arg.into());
        self
    }

    /// Forces (or, with `false`, restores the default for) running the server from a private
    /// mirror of the installation: copies of `postgres` and `initdb` laid out under a private
    /// root so that the server's share directory is a private one whose `extension/` we can
    /// write, while everything else links to the real installation. Extension files then
    /// never touch the real installation. Without this, a mirror is used only when the real
    /// `<sharedir>/extension/` is not writable.
    pub fn private_mirror(mut self, force: bool) -> ClusterBuilder {
        self.force_mirror = force;
        self
    }

    /// Puts private mirrors under `dir` instead of [`crate::cache_dir`]. The directory is
    /// made mode 0755 so an unprivileged server user can reach it.
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> ClusterBuilder {
        self.cache_dir = Some(dir.into());
        self
    }

    /// Serves TLS with these files (`ssl=on`, on the TCP listener at `127.0.0.1`); the pg_hba
    /// rules stay `host` (TLS or not) unless [`hba_rule`](Self::hba_rule) says otherwise.
    pub fn tls(mut self, tls: ServerTls) -> ClusterBuilder {
        self.tls = Some(tls);
        self
    }

    /// Adds a `pg_hba.conf` line before the default rules (the first matching line decides),
    /// e.g. `hostssl all certuser 127.0.0.1/32 cert`. Keep the address loopback.
    pub fn hba_rule(mut self, line: impl Into<String>) -> ClusterBuilder {
        self.hba_rules.push(line.into());
        self
    }

    /// Creates a fresh temporary directory (`$TMPDIR/pgcluster-*`), installs extension files,
    /// runs `initdb` and starts the server, returning once it accepts connections.
    ///
    /// When running as root, initdb and the server run as `$PGCLUSTER_USER` (default
    /// `nobody`). Before the first cluster of a process starts, directories of clusters
    /// whose owning process died are swept (their servers killed, directories removed).
    pub fn start(self) -> Result<Cluster> {
        sweep::sweep_once();
        let user = user::server_user()?;
        let server = self.server_installation()?;
        let mut cluster = new_cluster(
            self.installation.clone(),
            server,
            user,
            self.settings.clone(),
        )?;
        if let Some(tls) = &self.tls {
            let settings = tls.install(&cluster)?;
            cluster.add_settings(settings);
        }
        initdb(&cluster, &self.initdb_args, &self.hba_rules)?;
        cluster.start()?;
        Ok(cluster)
    }

    /// The installation the server will run from: the real one, or a private mirror.
    fn server_installation(&self) -> Result<Installation> {
        let extensions = self
            .extensions
            .iter()
            .map(Extension::load)
            .collect::<Result<Vec<_>>>()?;
        let install_all = |ext_dir: &Path| {
            extensions
                .iter()
                .try_for_each(|files| files.install(ext_dir))
        };
        if extensions.is_empty() && !self.force_mirror {
            return Ok(self.installation.clone());
        }
        let ext_dir = self.installation.sharedir().join("extension");
        if !self.force_mirror && extension::dir_writable(&ext_dir) {
            match install_all(&ext_dir) {
                Ok(()) => return Ok(self.installation.clone()),
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::PermissionDenied
                        || source.raw_os_error() == Some(libc::EROFS) => {}
                Err(e) => return Err(e),
            }
        }
        let cache = self.cache_dir.clone().unwrap_or_else(cache_dir);
        cache::ensure_dir(&cache)?;
        let mirrored = mirror::mirror(&self.installation, &cache)?;
        install_all(&mirrored.sharedir().join("extension"))?;
        Ok(mirrored)
    }
}

/// Creates a fresh temporary directory (`$TMPDIR/pgcluster-*`, registered for clean-up) with
/// empty data and socket directories and a log file, and the (stopped) [`Cluster`] for it.
pub(crate) fn new_cluster(
    installation: Installation,
    server: Installation,
    user: Option<ServerUser>,
    settings: Vec<(String, String)>,
) -> Result<Cluster> {
    let keep = std::env::var("PGCLUSTER_KEEP").is_ok_and(|v| !v.is_empty() && v != "0");
    let tmp = std::env::temp_dir();
    let tempdir = tempfile::Builder::new()
        .prefix(DIR_PREFIX)
        .tempdir_in(&tmp)
        .ctx("creating temporary directory in", &tmp)?;
    let base = tempdir.path().to_path_buf();
    fs::write(base.join(OWNER_FILE), std::process::id().to_string())
        .ctx("writing", &base.join(OWNER_FILE))?;
    if keep {
        fs::write(base.join(KEEP_FILE), b"").ctx("writing", &base.join(KEEP_FILE))?;
    }
    let data_dir = base.join("data");
    let registry_id = registry::register(base.clone(), data_dir.clone(), keep);
    let cluster = Cluster::new(
        installation,
        server,
        user,
        settings,
        tempdir,
        registry_id,
        keep,
    )?;
    prepare_dirs(&cluster)?;
    Ok(cluster)
}

/// An extension to install, as given to the builder; read from disk only at start.
#[derive(Clone, Debug)]
enum Extension {
    /// In memory already.
    Files(ExtensionFiles),
    /// A control file and scripts on disk.
    Paths {
        control: PathBuf,
        scripts: Vec<PathBuf>,
    },
    /// An extension directory.
    Dir(PathBuf),
}

impl Extension {
    fn load(&self) -> Result<Cow<'_, ExtensionFiles>> {
        match self {
            Extension::Files(files) => Ok(Cow::Borrowed(files)),
            Extension::Paths { control, scripts } => {
                ExtensionFiles::from_paths(control, scripts).map(Cow::Owned)
            }
            Extension::Dir(dir) => ExtensionFiles::from_dir(dir).map(Cow::Owned),
        }
    }
}

/// Creates the data and socket directories (owned by the server user) and the log file.
fn prepare_dirs(cluster: &Cluster) -> Result<()> {
    let base = cluster.base_dir();
    let user = cluster.server_user();
    if user.is_some() {
        // The unprivileged server user must be able to traverse our 0700 temp dir.
        fs::set_permissions(base, fs::Permissions::from_mode(0o755)).ctx("chmod", base)?;
    }
    let data = cluster.data_dir();
    fs::DirBuilder::new()
        .mode(0o700)
        .create(data)
        .ctx("creating data directory", data)?;
    user::chown_to(data, user)?;
    // Only the server's account (and root) may enter: the socket trusts whoever reaches it.
    let sock = cluster.socket_dir();
    fs::DirBuilder::new()
        .mode(0o700)
        .create(sock)
        .ctx("creating socket directory", sock)?;
    user::chown_to(sock, user)?;
    let log = cluster.log_path();
    fs::write(log, b"").ctx("creating log file", log)?;
    Ok(())
}

/// Runs initdb for the cluster's data directory.
fn initdb(cluster: &Cluster, extra: &[String], hba_rules: &[String]) -> Result<()> {
    let server = cluster.server_installation();
    let data = cluster.data_dir();
    // The unix socket (in a 0700 directory) trusts; TCP wants the generated password, which
    // initdb (as the server's account) reads from a file of its own, removed right after.
    let pwfile = cluster.base_dir().join("pwfile");
    crate::secret::write_private(&pwfile, &format!("{}\n", cluster.password()))?;
    user::chown_to(&pwfile, cluster.server_user())?;
    let mut cmd = Command::new(server.bin("initdb"));
    cmd.arg("-D").arg(data).args([
        "-U",
        "postgres",
        "--auth-local=trust",
        "--auth-host=scram-sha-256",
        "-E",
        "UTF8",
        "--locale=C",
        "--no-sync",
    ]);
    cmd.arg(format!("--pwfile={}", pwfile.display()));
    if server.major() >= 14 {
        cmd.arg("--no-instructions");
    }
    cmd.args(extra);
    let ran = run_initdb(cmd, cluster.server_user(), cluster.base_dir(), data);
    let _ = fs::remove_file(&pwfile);
    ran?;
    let hba = data.join("pg_hba.conf");
    let mut text: String = hba_rules.iter().map(|rule| format!("{rule}\n")).collect();
    text.push_str(HBA);
    fs::write(&hba, text).ctx("writing", &hba)
}

/// The `pg_hba.conf` of a throw-away cluster. The unix socket (in a directory only the server's
/// account can enter) trusts; TCP wants a password, which only `postgres` has. Replication
/// connections (for [`Cluster::replica`]) are accepted only on the socket, and only for
/// `postgres` (initdb's default also admits every role, on TCP as well).
const HBA: &str = "\
# pgcluster: written after initdb; the socket directory is mode 0700.
# TYPE  DATABASE     USER      ADDRESS        METHOD
local   all          all                      trust
host    all          all       127.0.0.1/32   scram-sha-256
host    all          all       ::1/128        scram-sha-256
local   replication  postgres                 trust
";

fn run_initdb(mut cmd: Command, user: Option<&ServerUser>, home: &Path, data: &Path) -> Result<()> {
    user::prepare_server_command(&mut cmd, user, home);
    let program = cmd.get_program().to_owned();
    let out = cmd.output().ctx("running", Path::new(&program))?;
    if out.status.success() {
        return Ok(());
    }
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    Err(Error::Initdb {
        data_dir: data.to_path_buf(),
        status: out.status.to_string(),
        output,
    })
}
