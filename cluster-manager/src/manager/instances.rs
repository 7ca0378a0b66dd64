//! Cache instances: creating one (reserving its superblock region id) and changing its
//! maxmemory or policy (marking regions past the new limit draining). Called by the
//! API's instance handlers; regions are never dropped here, only marked, because agents
//! must vacate them first (see `regions`).

use dmc_proto::ByteSize;

use super::{Manager, ManagerError};
use crate::state::Instance;

/// A versioned text of an instance that agents change by compare-and-set and install
/// from the pushed map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared {
    /// The ACL users (ACL file lines).
    Acl,
    /// The function libraries (a JSON array of their code).
    Functions,
    /// The scripts loaded with SCRIPT LOAD (a JSON array of their bodies).
    Scripts,
}

impl Shared {
    fn of(self, inst: &mut Instance) -> (&mut String, &mut u64) {
        match self {
            Shared::Acl => (&mut inst.acl, &mut inst.acl_version),
            Shared::Functions => (&mut inst.functions, &mut inst.functions_version),
            Shared::Scripts => (&mut inst.scripts, &mut inst.scripts_version),
        }
    }
}

/// What [`Manager::set_acl`] did: the users it holds now, at `version`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AclUsers {
    /// Whether the caller's users were stored (false: they were based on an older
    /// version; these are the current ones, to apply the change to again).
    pub applied: bool,
    pub version: u64,
    pub users: String,
}

/// What [`Manager::set_list`] did: the libraries (each one's code) or scripts (each
/// one's body) it holds now, at `version`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Listed {
    /// Whether the caller's list was stored (false: based on an older version; this
    /// is the current one).
    pub applied: bool,
    pub version: u64,
    pub items: Vec<String>,
}

/// A list kept as text (a JSON array; empty: none).
fn parse_list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

impl Manager {
    /// Replaces instance `name`'s ACL users with `users` if they are based on the
    /// current version `base` (compare-and-set: two agents changing users at once do
    /// not lose either change; the one that lost applies its change to the winner's
    /// users and tries again). Agents install them from the pushed map.
    pub fn set_acl(&self, name: &str, base: u64, users: String) -> Result<AclUsers, ManagerError> {
        let (applied, version, users) = self.set_shared(name, Shared::Acl, base, users)?;
        Ok(AclUsers {
            applied,
            version,
            users,
        })
    }

    /// Instance `name`'s ACL users.
    pub fn acl(&self, name: &str) -> Result<AclUsers, ManagerError> {
        let (version, users) = self.shared(name, Shared::Acl)?;
        Ok(AclUsers {
            applied: false,
            version,
            users,
        })
    }

    /// Replaces instance `name`'s function libraries (each one's code) or loaded
    /// scripts (`which`) if they are based on version `base`, as
    /// [`set_acl`](Self::set_acl) does the users: FUNCTION LOAD, DELETE, FLUSH and
    /// RESTORE, or SCRIPT LOAD and FLUSH, on any agent, kept here so an agent that
    /// joins later has them.
    pub fn set_list(
        &self,
        name: &str,
        which: Shared,
        base: u64,
        items: Vec<String>,
    ) -> Result<Listed, ManagerError> {
        let text = serde_json::to_string(&items)
            .map_err(|e| ManagerError::Invalid(format!("{which:?}: {e}")))?;
        let (applied, version, text) = self.set_shared(name, which, base, text)?;
        Ok(Listed {
            applied,
            version,
            items: parse_list(&text),
        })
    }

    /// Instance `name`'s function libraries or loaded scripts.
    pub fn list(&self, name: &str, which: Shared) -> Result<Listed, ManagerError> {
        let (version, text) = self.shared(name, which)?;
        Ok(Listed {
            applied: false,
            version,
            items: parse_list(&text),
        })
    }

    /// Compare-and-set of one shared text: `(applied, version, text)` after it.
    fn set_shared(
        &self,
        name: &str,
        which: Shared,
        base: u64,
        text: String,
    ) -> Result<(bool, u64, String), ManagerError> {
        let (version, current) = self.shared(name, which)?;
        if version != base {
            return Ok((false, version, current));
        }
        self.update(|s| {
            let inst = s
                .instances
                .get_mut(name)
                .ok_or_else(|| ManagerError::NotFound(format!("instance {name}")))?;
            let (stored, version) = which.of(inst);
            if *version != base {
                return Ok((false, *version, stored.clone()));
            }
            *stored = text;
            *version += 1;
            tracing::info!(instance = name, version = *version, ?which, "changed");
            Ok((true, *version, stored.clone()))
        })
    }

    /// One shared text of instance `name` and its version.
    fn shared(&self, name: &str, which: Shared) -> Result<(u64, String), ManagerError> {
        let mut state = self.state.lock();
        let inst = state
            .instances
            .get_mut(name)
            .ok_or_else(|| ManagerError::NotFound(format!("instance {name}")))?;
        let (text, version) = which.of(inst);
        Ok((*version, text.clone()))
    }

    /// Creates an instance: its superblock region id is reserved now (the first agent
    /// of the instance asks for it), its agents are started separately
    /// (`agents scale N --instance NAME`).
    pub async fn create_instance(
        &self,
        name: &str,
        maxmemory: ByteSize,
        policy: &str,
        backups: u32,
    ) -> Result<Instance, ManagerError> {
        if !dmc_proto::cluster::valid_instance_name(name) {
            return Err(ManagerError::Invalid(format!(
                "{name:?} cannot name an instance: use 1 to 64 letters, digits, '-' or '_'"
            )));
        }
        let shards = self.shard_count;
        // Not while a grant picks a region id: both would take the same lowest one.
        let _one = self.granting.lock().await;
        self.update(|s| {
            if s.instances.contains_key(name) {
                return Err(ManagerError::Exists(format!("instance {name}")));
            }
            let super_region = s
                .free_region_id(1)
                .ok_or_else(|| ManagerError::Full("no free region id".into()))?;
            let mut inst = Instance::new(name, maxmemory, policy, super_region, shards);
            inst.backups = backups;
            s.instances.insert(name.to_string(), inst.clone());
            tracing::info!(
                instance = name,
                super_region,
                maxmemory = maxmemory.0,
                policy,
                "created an instance"
            );
            Ok(inst)
        })
    }

    /// Changes an instance's maxmemory, policy and/or backup agents per shard; agents
    /// follow the pushed map (growing is immediate, shrinking evicts down to the new
    /// limit; new backups warm up from the primaries' next writes and fills).
    pub fn resize_instance(
        &self,
        name: &str,
        change: crate::api::ResizeInstance,
    ) -> Result<Instance, ManagerError> {
        let crate::api::ResizeInstance {
            maxmemory,
            policy,
            backups,
        } = change;
        let size = self.pool.region_size.0;
        self.update(|s| {
            let inst = s
                .instances
                .get_mut(name)
                .ok_or_else(|| ManagerError::NotFound(format!("instance {name}")))?;
            if let Some(m) = maxmemory {
                inst.maxmemory = m;
            }
            if let Some(p) = policy {
                inst.policy = p;
            }
            let rebalance = backups.is_some_and(|b| b != inst.backups);
            if let Some(b) = backups {
                inst.backups = b;
            }
            if rebalance {
                s.rebalance_except(name, &self.warming_agents());
            }
            let Some(inst) = s.instances.get(name).cloned() else {
                return Err(ManagerError::NotFound(format!("instance {name}")));
            };
            // Regions past the new maxmemory are vacated by the agents, then returned.
            if inst.maxmemory.0 > 0 {
                let allowed = (inst.maxmemory.0 / size).max(1) as usize;
                let mut active: Vec<u16> = s
                    .regions
                    .values()
                    .filter(|r| r.instance == name && !r.draining)
                    .map(|r| r.id)
                    .collect();
                active.sort_unstable();
                while active.len() > allowed {
                    // Never the superblock's region: it holds the table root.
                    let Some(pos) = active.iter().rposition(|id| *id != inst.super_region) else {
                        break;
                    };
                    let id = active.remove(pos);
                    if let Some(r) = s.regions.get_mut(&id) {
                        r.draining = true;
                        tracing::info!(
                            region = id,
                            instance = name,
                            "draining a region to return it"
                        );
                    }
                }
            }
            Ok(inst)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use dmc_proto::ByteSize;
    use dmc_proto::cluster::DEFAULT_INSTANCE as D;

    use crate::manager::{Manager, ManagerError, PoolSettings};
    use crate::state::StateFile;

    #[tokio::test]
    async fn instances_have_their_own_superblock_agents_and_shards() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let lease = Duration::from_secs(5);
        let m = Manager::open(StateFile::new(&path), 8, lease, PoolSettings::default()).unwrap();
        for bad in ["", "a/b", "x y", &"n".repeat(65)] {
            assert!(
                matches!(
                    m.create_instance(bad, ByteSize(1 << 30), "allkeys-lru", 0)
                        .await,
                    Err(ManagerError::Invalid(_))
                ),
                "{bad:?}"
            );
        }
        let b = m
            .create_instance("b", ByteSize(1 << 30), "allkeys-lru", 0)
            .await
            .unwrap();
        let c = m
            .create_instance("c", ByteSize(0), "noeviction", 0)
            .await
            .unwrap();
        assert_eq!(
            (b.super_region, c.super_region),
            (2, 3),
            "region 1 is default's"
        );
        assert!(matches!(
            m.create_instance("b", ByteSize(1), "noeviction", 0).await,
            Err(ManagerError::Exists(_))
        ));
        // Agents of each instance share only their own instance's shards.
        let d1 = m.register_agent("127.0.0.1:1".into(), D).unwrap();
        let b1 = m.register_agent("127.0.0.1:2".into(), "b").unwrap();
        let b2 = m.register_agent("127.0.0.1:3".into(), "b").unwrap();
        assert!(m.register_agent("127.0.0.1:4".into(), "nope").is_err());
        assert!(m.slots(D).unwrap().iter().all(|r| r.primary == Some(d1)));
        let owners: Vec<_> = m.slots("b").unwrap().iter().map(|r| r.primary).collect();
        assert_eq!(owners.iter().filter(|o| **o == Some(b1)).count(), 4);
        assert_eq!(owners.iter().filter(|o| **o == Some(b2)).count(), 4);
        assert!(m.slots("c").unwrap().iter().all(|r| r.primary.is_none()));
        // Each instance's map names its own agents and superblock.
        let map = m.map("b").unwrap();
        assert_eq!(map.instance.super_region, 2);
        assert_eq!(map.instance.policy, "allkeys-lru");
        let ids: Vec<_> = map.agents.iter().map(|a| a.id).collect();
        assert_eq!(ids, vec![b1, b2]);
        assert_eq!(m.map(D).unwrap().agents.len(), 1);
        assert!(m.map("nope").is_err());
        // Removing an agent re-balances its instance only.
        m.remove_agent(b1).unwrap();
        assert!(m.slots("b").unwrap().iter().all(|r| r.primary == Some(b2)));
        assert!(m.slots(D).unwrap().iter().all(|r| r.primary == Some(d1)));
        let st = m.status();
        let inst: Vec<_> = st
            .instances
            .iter()
            .map(|i| (i.name.as_str(), i.agents))
            .collect();
        assert_eq!(inst, vec![("b", 1), ("c", 0), ("default", 1)]);
        // All of it survives a restart.
        let before = m.snapshot();
        drop(m);
        let m = Manager::open(StateFile::new(&path), 8, lease, PoolSettings::default()).unwrap();
        assert_eq!(m.snapshot(), before);
        assert_eq!(m.instance_of(b2).as_deref(), Some("b"));
    }

    #[test]
    fn libraries_change_by_compare_and_set_reach_the_map_and_survive_a_restart() {
        use crate::manager::instances::Shared;
        const F: Shared = Shared::Functions;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let lease = Duration::from_secs(5);
        let m = Manager::open(StateFile::new(&path), 8, lease, PoolSettings::default()).unwrap();
        let lib = |n: &str| {
            format!("#!lua name={n}\nredis.register_function('{n}', function() return 1 end)")
        };
        let first = m.set_list(D, F, 0, vec![lib("a")]).unwrap();
        assert!(first.applied);
        assert_eq!((first.version, first.items.clone()), (1, vec![lib("a")]));
        // Based on version 0 still: refused, with what is there now.
        let lost = m.set_list(D, F, 0, vec![lib("b")]).unwrap();
        assert!(!lost.applied);
        assert_eq!((lost.version, lost.items), (1, vec![lib("a")]));
        let second = m.set_list(D, F, 1, vec![lib("a"), lib("b")]).unwrap();
        assert!(second.applied && second.version == 2);
        let map = m.map(D).unwrap();
        assert_eq!(map.instance.functions_version, 2);
        let listed: Vec<String> = serde_json::from_str(&map.instance.functions).unwrap();
        assert_eq!(listed, vec![lib("a"), lib("b")]);
        // The users and the scripts are separate texts with their own versions.
        assert_eq!(m.acl(D).unwrap().version, 0);
        let scripts = m
            .set_list(D, Shared::Scripts, 0, vec!["return 1".into()])
            .unwrap();
        assert!(scripts.applied && scripts.version == 1);
        assert_eq!(m.map(D).unwrap().instance.scripts_version, 1);
        drop(m);
        let m = Manager::open(StateFile::new(&path), 8, lease, PoolSettings::default()).unwrap();
        assert_eq!(m.list(D, F).unwrap().items, vec![lib("a"), lib("b")]);
        assert_eq!(
            m.list(D, Shared::Scripts).unwrap().items,
            vec!["return 1".to_string()]
        );
        assert!(m.list("nope", F).is_err());
    }
}
