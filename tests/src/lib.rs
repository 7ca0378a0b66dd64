//! Helpers for end-to-end tests: find the workspace's binaries, start them on free
//! loopback ports, and kill them when the test ends.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Path of a binary of this workspace, built next to the test executable.
pub fn bin(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .context("test executable has no target directory")?;
    let path = dir.join(name);
    if !path.exists() {
        bail!(
            "{} is missing: build the workspace first (cargo build --workspace)",
            path.display()
        );
    }
    Ok(path)
}

/// Starts a binary that prints `<name> ready listen=ADDR` on stdout and returns the
/// child and the address, waiting at most 20 s.
fn start_ready(name: &str, args: &[String]) -> Result<(Child, String)> {
    let mut child = Command::new(bin(name)?)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("spawning {name}"))?;
    let stdout = child.stdout.take().context("stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        for _ in lines {}
    });
    let line = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(l) => l,
        Err(_) => {
            let _ = child.kill();
            bail!("{name} did not report ready within 20 s");
        }
    };
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("listen="))
        .with_context(|| format!("unexpected ready line {line:?}"))?
        .to_string();
    Ok((child, addr))
}

/// A running `compute-agent`, killed on drop.
pub struct Agent {
    pub child: Child,
    pub addr: String,
}

impl Agent {
    /// Starts an agent on a free loopback port with extra flags.
    pub fn start(extra: &[&str]) -> Result<Self> {
        let mut args: Vec<String> = ["--port", "0", "--log", "warn"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let (child, addr) = start_ready("compute-agent", &args)?;
        Ok(Agent { child, addr })
    }

    pub fn port(&self) -> String {
        self.addr.rsplit(':').next().unwrap_or_default().to_string()
    }

    /// Runs `redis-cli -p PORT args…` and returns its stdout.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port()])
            .args(args)
            .output()
            .context("running redis-cli (apt-get install redis-tools)")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running `memory-node` process, killed on drop.
pub struct MemoryNode {
    pub child: Child,
    /// `host:port` it listens on.
    pub endpoint: String,
    pub id: u32,
    pub dir: PathBuf,
}

impl MemoryNode {
    /// Starts a node on a free loopback port and waits (bounded) for its ready line.
    pub fn start(id: u32, dir: &Path, capacity: &str) -> Result<Self> {
        Self::start_with(id, dir, capacity, &[])
    }

    /// [`start`](Self::start) with extra flags.
    pub fn start_with(id: u32, dir: &Path, capacity: &str, extra: &[&str]) -> Result<Self> {
        let args: Vec<String> = [
            "--id",
            &id.to_string(),
            "--listen",
            "127.0.0.1:0",
            "--capacity",
            capacity,
            "--log",
            "warn",
            "--dir",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(std::iter::once(dir.display().to_string()))
        .chain(extra.iter().map(|s| s.to_string()))
        .collect();
        let (child, endpoint) = start_ready("memory-node", &args)?;
        Ok(MemoryNode {
            child,
            endpoint,
            id,
            dir: dir.to_path_buf(),
        })
    }

    /// SIGKILL: the process dies without any cleanup.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for MemoryNode {
    fn drop(&mut self) {
        self.kill();
    }
}
