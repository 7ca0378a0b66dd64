//! Starting and stopping compute-agent processes for `agents scale`.
//!
//! [`Launcher`] is the interface: start one agent, ask it to stop (it drains its
//! clients first), check whether it still runs, kill it. [`LocalLauncher`] runs agents
//! as processes on this host, each on a loopback port it picks, logging to a file of
//! its own and pointed back at this manager; systemd or Kubernetes launchers would
//! implement the same trait from `deploy/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use parking_lot::Mutex;

use crate::state::LaunchRecord;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("starting {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

pub trait Launcher: Send + Sync {
    /// Starts an agent of `instance` that registers with the manager by itself.
    fn start(&self, instance: &str) -> Result<LaunchRecord, LaunchError>;
    /// Asks the agent to drain its connections and exit.
    fn stop(&self, agent: &LaunchRecord) -> Result<(), LaunchError>;
    /// Whether the agent's process still runs.
    fn running(&self, agent: &LaunchRecord) -> bool;
    /// Ends the agent at once (it did not exit after draining).
    fn kill(&self, agent: &LaunchRecord);
    /// Whether the agent's process is provably gone (not merely unprovable as ours):
    /// only then may its shards be released without waiting for its lease.
    fn exited(&self, agent: &LaunchRecord) -> bool {
        !self.running(agent)
    }
}

/// How [`LocalLauncher`] starts agents.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    /// The `compute-agent` binary.
    pub binary: PathBuf,
    /// A TOML config every agent gets (`--config`); flags below override it.
    pub config: Option<PathBuf>,
    /// Where each agent's log goes (`agent-PORT.log`).
    pub log_dir: PathBuf,
    /// Address agents listen on.
    pub bind: String,
    /// The manager's URL, passed to agents as `--manager`.
    pub manager_url: String,
    /// The CA of an https manager's certificate, passed as `--manager-ca-cert-file`.
    pub manager_ca: Option<PathBuf>,
    /// First port to try for agents (the next free one from here); 0: any free port.
    pub port_base: u16,
}

/// Agents as child processes of this manager on this host.
pub struct LocalLauncher {
    settings: LocalSettings,
    /// Children this manager started (reaped when they exit). After a manager restart,
    /// agents it started before are reached by pid alone.
    children: Mutex<HashMap<u32, Child>>,
    /// Ports handed out: an agent binds its port a moment after it starts, so a port
    /// that is still free may already be promised.
    given: Mutex<std::collections::HashSet<u16>>,
}

impl LocalLauncher {
    pub fn new(settings: LocalSettings) -> LocalLauncher {
        LocalLauncher {
            settings,
            children: Mutex::new(HashMap::new()),
            given: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// The `compute-agent` binary next to this executable, if there is one.
    pub fn sibling_binary() -> PathBuf {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("compute-agent")))
            .filter(|p| p.exists())
            .unwrap_or_else(|| PathBuf::from("compute-agent"))
    }

    /// A port nothing listens on and not handed out before: the first such from
    /// `base`, or any.
    fn free_port(&self, bind: &str, base: u16) -> Result<u16, LaunchError> {
        let mut given = self.given.lock();
        let free = |port: u16| std::net::TcpListener::bind((bind, port)).is_ok();
        if base > 0
            && let Some(port) =
                (base..base.saturating_add(1000)).find(|p| !given.contains(p) && free(*p))
        {
            given.insert(port);
            return Ok(port);
        }
        for _ in 0..100 {
            let l = std::net::TcpListener::bind((bind, 0)).map_err(|source| LaunchError::Io {
                context: format!("finding a free port on {bind}"),
                source,
            })?;
            let port = l
                .local_addr()
                .map(|a| a.port())
                .map_err(|source| LaunchError::Io {
                    context: "reading a port".into(),
                    source,
                })?;
            if given.insert(port) {
                return Ok(port);
            }
        }
        Err(LaunchError::Io {
            context: format!("finding a free port on {bind}"),
            source: std::io::Error::other("every port tried was handed out already"),
        })
    }

    fn signal(pid: u32, sig: libc::c_int) -> bool {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        pid > 0 && unsafe { libc::kill(pid as libc::pid_t, sig) } == 0
    }

    /// Whether `agent`'s pid is still the process this launcher started: its child,
    /// or (after a manager restart) a process with the recorded start time. A pid the
    /// kernel has since given to another process is never signalled.
    fn is_ours(&self, agent: &LaunchRecord) -> bool {
        if self.children.lock().contains_key(&agent.pid) {
            return true;
        }
        agent.proc_start != 0 && proc_start(agent.pid) == Some(agent.proc_start)
    }

    /// Signals `agent` if it is still ours.
    fn signal_ours(&self, agent: &LaunchRecord, sig: libc::c_int) -> bool {
        if !self.is_ours(agent) {
            // Gone already, or the pid belongs to another process now.
            if proc_start(agent.pid).is_some() {
                tracing::warn!(pid = agent.pid, listen = %agent.listen,
                    "not signalling a pid this launcher cannot prove it started");
            }
            return false;
        }
        Self::signal(agent.pid, sig)
    }
}

/// A process's start time in clock ticks since boot (field 22 of `/proc/PID/stat`).
pub fn proc_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from its end.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

impl Launcher for LocalLauncher {
    fn start(&self, instance: &str) -> Result<LaunchRecord, LaunchError> {
        let s = &self.settings;
        // Agents' logs name keys and clients: readable by this user only.
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(&s.log_dir)
            .map_err(|source| LaunchError::Io {
                context: format!("creating {}", s.log_dir.display()),
                source,
            })?;
        let port = self.free_port(&s.bind, s.port_base)?;
        let log = s.log_dir.join(format!("agent-{port}.log"));
        let out = open_log(&log)?;
        let err = out.try_clone().map_err(|source| LaunchError::Io {
            context: format!("opening {}", log.display()),
            source,
        })?;
        let mut cmd = Command::new(&s.binary);
        if let Some(c) = &s.config {
            cmd.arg("--config").arg(c);
        }
        cmd.args(["--bind", &s.bind, "--port", &port.to_string()])
            .args(["--manager", &s.manager_url])
            .args(s.manager_ca.iter().flat_map(|ca| {
                [
                    std::ffi::OsStr::new("--manager-ca-cert-file"),
                    ca.as_os_str(),
                ]
            }))
            .args(["--instance", instance])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // The agent joins with this process's cluster secret, through the environment
        // (never its command line, which `ps` shows).
        if let Some(secret) = dmc_process::secret::installed() {
            cmd.env(
                dmc_process::secret::ENV,
                String::from_utf8_lossy(secret.bytes()).into_owned(),
            );
        }
        // Its own process group: a signal to the manager's group does not reach it.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().map_err(|source| LaunchError::Spawn {
            binary: s.binary.clone(),
            source,
        })?;
        let pid = child.id();
        let started = proc_start(pid).unwrap_or(0);
        self.children.lock().insert(pid, child);
        tracing::info!(pid, port, instance, log = %log.display(), "started an agent");
        Ok(LaunchRecord {
            listen: format!("{}:{port}", s.bind),
            pid,
            log,
            started_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            instance: instance.to_string(),
            proc_start: started,
        })
    }

    fn stop(&self, agent: &LaunchRecord) -> Result<(), LaunchError> {
        tracing::info!(pid = agent.pid, listen = %agent.listen, "stopping an agent (it drains first)");
        self.signal_ours(agent, libc::SIGTERM);
        Ok(())
    }

    fn running(&self, agent: &LaunchRecord) -> bool {
        let mut children = self.children.lock();
        if let Some(child) = children.get_mut(&agent.pid) {
            return match child.try_wait() {
                Ok(None) => true,
                _ => {
                    children.remove(&agent.pid);
                    false
                }
            };
        }
        // Not our child (started before a manager restart): probe the pid, if it is
        // still the process we started.
        drop(children);
        self.signal_ours(agent, 0)
    }

    fn kill(&self, agent: &LaunchRecord) {
        self.signal_ours(agent, libc::SIGKILL);
        if let Some(mut child) = self.children.lock().remove(&agent.pid) {
            let _ = child.wait();
        }
    }

    fn exited(&self, agent: &LaunchRecord) -> bool {
        if self.running(agent) {
            return false;
        }
        // Reaped, or its pid is free or another process's (a start time recorded and
        // different); a record without a start time proves nothing.
        match proc_start(agent.pid) {
            None => true,
            Some(start) => agent.proc_start != 0 && start != agent.proc_start,
        }
    }
}

fn open_log(path: &Path) -> Result<std::fs::File, LaunchError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| LaunchError::Io {
            context: format!("opening {}", path.display()),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launcher() -> LocalLauncher {
        LocalLauncher::new(LocalSettings {
            binary: PathBuf::from("/nonexistent/compute-agent"),
            config: None,
            log_dir: std::env::temp_dir(),
            bind: "127.0.0.1".into(),
            manager_url: "http://127.0.0.1:1".into(),
            manager_ca: None,
            port_base: 0,
        })
    }

    /// A record whose pid now belongs to another process (its start time differs, as
    /// after a manager restart and pid reuse) is never signalled: `running` says no
    /// and `stop`/`kill` leave the process alone. This test process stands in for the
    /// stranger.
    #[test]
    fn a_reused_pid_is_never_signalled() {
        let me = std::process::id();
        let started = proc_start(me).expect("this process has a start time");
        assert!(proc_start(u32::MAX).is_none());
        let l = launcher();
        let stranger = LaunchRecord {
            listen: "127.0.0.1:1".into(),
            pid: me,
            log: PathBuf::new(),
            started_ms: 0,
            instance: "default".into(),
            proc_start: started + 1,
        };
        assert!(!l.running(&stranger));
        l.stop(&stranger).unwrap();
        l.kill(&stranger);
        // Still alive to assert this; and a legacy record without a start time is not
        // ours either.
        assert!(!l.running(&LaunchRecord {
            proc_start: 0,
            ..stranger.clone()
        }));
        let ours = LaunchRecord {
            proc_start: started,
            ..stranger
        };
        assert!(l.running(&ours), "the recorded start time proves the pid");
    }
}
