//! The permission check (`ACLSelectorCheckCmd` in Redis 7.0): may this user run this
//! call — the command (or subcommand, or first argument), its keys with the access each
//! needs, its channels — and the `-NOPERM` texts of a refusal.

use bytes::Bytes;
use thiserror::Error;

use super::categories::{KEY_ANY, KEY_R, KEY_RW, KEY_W, KeyAccess, NOT_KEY};
use super::commands::UNIVERSE;
use super::log::Reason;
use super::user::{Perms, User};
use crate::glob::glob;
use crate::table::{Cmd, Spec, lookup_index};

/// Why a call was refused, and what it named: the command's full name (`config|set`),
/// or the key or channel refused. `Display` is the error reply (`NOPERM ...`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Denied {
    #[error("NOPERM this user has no permissions to run the '{0}' command")]
    Command(String),
    #[error("NOPERM this user has no permissions to access one of the keys used as arguments")]
    Key(Bytes),
    #[error("NOPERM this user has no permissions to access one of the channels used as arguments")]
    Channel(Bytes),
}

impl Denied {
    /// The `ACL LOG` reason.
    pub fn reason(&self) -> Reason {
        match self {
            Denied::Command(_) => Reason::Command,
            Denied::Key(_) => Reason::Key,
            Denied::Channel(_) => Reason::Channel,
        }
    }

    /// The `ACL LOG` object: the command's full name, or the key or channel.
    pub fn object(&self) -> Bytes {
        match self {
            Denied::Command(name) => Bytes::from(name.clone()),
            Denied::Key(k) | Denied::Channel(k) => k.clone(),
        }
    }

    /// `ACL DRYRUN`'s reply text for this refusal.
    pub fn dryrun_text(&self) -> String {
        match self {
            Denied::Command(name) => {
                format!("This user has no permissions to run the '{name}' command")
            }
            Denied::Key(k) => format!(
                "This user has no permissions to access the '{}' key",
                String::from_utf8_lossy(k)
            ),
            Denied::Channel(c) => format!(
                "This user has no permissions to access the '{}' channel",
                String::from_utf8_lossy(c)
            ),
        }
    }
}

impl Perms {
    /// Whether `key` may be used with `need` (`ACLSelectorCheckKey`): a pattern with
    /// at least those permissions matches it.
    fn key_allowed(&self, key: &[u8], need: KeyAccess) -> bool {
        self.all_keys
            || self
                .keys
                .iter()
                .any(|p| p.access & need == need && glob(&p.pattern, key, false))
    }

    /// `ACLCheckChannelAgainstList`: a channel name is matched against the patterns,
    /// a subscribed pattern (PSUBSCRIBE) only equals one literally.
    fn channel_allowed(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|p| {
                if is_pattern {
                    p == channel
                } else {
                    glob(p, channel, false)
                }
            })
    }
}

/// Whether a command with a key count (EVAL, ZUNIONSTORE, LMPOP, ...) has a count
/// Redis takes: at least one key, all present. Otherwise Redis's key spec fails and its
/// fallback (`genericGetKeys`) names no key, not even a destination: the command will
/// refuse the call itself.
fn counted_keys_valid(spec: &Spec, args: &[Bytes]) -> bool {
    let Some(at) = usize::try_from(spec.numkeys).ok().filter(|&at| at > 0) else {
        return true;
    };
    let present = args.len().saturating_sub(at + 1);
    args.get(at)
        .and_then(|c| crate::parse_i64(c))
        .and_then(|n| usize::try_from(n).ok())
        .is_some_and(|n| n >= 1 && n <= present)
}

impl User {
    /// Whether the user may run this call: `spec` is the command's table row and
    /// `args` the whole call, its name first, arity already checked. Commands first,
    /// then keys, then channels, as Redis checks them.
    pub fn check(&self, spec: &Spec, args: &[Bytes]) -> Result<(), Denied> {
        if self.unrestricted() {
            return Ok(());
        }
        let perms = &self.perms;
        let Some(row) = lookup_index(spec.name.as_bytes()) else {
            // Not a table row: nothing is known of it, so only a user allowed
            // everything (above) may run it.
            return Err(Denied::Command(spec.name.to_string()));
        };
        let id = UNIVERSE.resolve(row, args);
        let item = UNIVERSE.item(id);

        if !perms.all_commands && !item.no_auth && !perms.allowed.get(id) {
            let first_arg_allowed = item.parent.is_none()
                && args.get(1).is_some_and(|arg| {
                    perms
                        .first_args
                        .get(&id)
                        .is_some_and(|allowed| allowed.iter().any(|a| a.eq_ignore_ascii_case(arg)))
                });
            if !first_arg_allowed {
                return Err(Denied::Command(item.name.clone()));
            }
        }

        if !perms.all_keys {
            // A subcommand's key (OBJECT ENCODING key, MEMORY USAGE key) is its second
            // argument, whatever the container's row says.
            let positions = if item.parent.is_some() {
                if item.key_access(0).is_some() && args.len() > 2 {
                    vec![2]
                } else {
                    Vec::new()
                }
            } else if counted_keys_valid(spec, args) {
                spec.key_positions(args)
            } else {
                Vec::new()
            };
            for (nth, &at) in positions.iter().enumerate() {
                let Some(key) = args.get(at) else { continue };
                let need = match item.key_access(nth) {
                    // SET's key is read too only with GET (Redis's `setGetKeys`).
                    Some(_) if spec.cmd == Cmd::Set => {
                        if args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"get")) {
                            KEY_RW
                        } else {
                            KEY_W
                        }
                    }
                    Some(NOT_KEY) => continue,
                    Some(need) => need,
                    // Unknown to the category table: the strictest need.
                    None => KEY_RW,
                };
                debug_assert!(matches!(need, KEY_ANY | KEY_R | KEY_W | KEY_RW));
                if !perms.key_allowed(key, need) {
                    return Err(Denied::Key(key.clone()));
                }
            }
        }

        if !perms.all_channels {
            // Redis's `commands_with_channels` that publish or subscribe (the
            // unsubscribes are never refused).
            let (channels, is_pattern) = match spec.cmd {
                Cmd::Subscribe | Cmd::SSubscribe => (args.get(1..), false),
                Cmd::PSubscribe => (args.get(1..), true),
                Cmd::Publish | Cmd::SPublish => (args.get(1..2), false),
                _ => (None, false),
            };
            for channel in channels.unwrap_or_default() {
                if !perms.channel_allowed(channel, is_pattern) {
                    return Err(Denied::Channel(channel.clone()));
                }
            }
        }
        Ok(())
    }

    /// Whether the user may run anything on any key and channel (`+@all ~* &*`, the
    /// default user's rules): [`User::check`] then always passes, and the pipelined
    /// fast paths need not ask it.
    pub fn unrestricted(&self) -> bool {
        let p = &self.perms;
        p.all_commands && p.all_keys && p.all_channels
    }

    /// Whether the user may use this channel (or, `is_pattern`, subscribe to this
    /// pattern): what decides whether a subscriber keeps its subscriptions after its
    /// user changed (`ACLKillPubsubClientsIfNeeded`).
    pub fn channel_allowed(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.perms.channel_allowed(channel, is_pattern)
    }

    /// Whether the user may read and write every key (`allkeys`, `~*`): what SORT asks
    /// before it reads the keys its BY and GET patterns name.
    pub fn all_keys_allowed(&self) -> bool {
        self.perms.all_keys
    }

    /// Whether the user may use `key` for reading (`write` false) or writing.
    pub fn key_allowed(&self, key: &[u8], write: bool) -> bool {
        self.perms
            .key_allowed(key, if write { KEY_W } else { KEY_R })
    }
}
