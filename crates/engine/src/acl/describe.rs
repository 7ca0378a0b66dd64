//! A user as text and as `ACL GETUSER`'s reply: Redis 7.0's `ACLDescribeUser` (the
//! `ACL LIST` line and the ACL file's), `ACLDescribeSelectorCommandRules` (the command
//! rules: `+@all` or `-@all`, then the categories that fit best, then single commands)
//! and the GETUSER map.
//!
//! Redis 7.0 does not keep the rules a user was given: it derives them from the bitmap,
//! so `+get +set` reads back as `-@all +set +get` there (its dict order) and as
//! `-@all +get +set` here (table order). The categories are fitted over DMC's commands,
//! so a rule set touching commands Redis has and DMC lacks can read back differently.

use bytes::Bytes;
use dmc_resp::Reply;

use super::categories::{Category, KEY_R, KEY_W};
use super::commands::UNIVERSE;
use super::user::{KeyPattern, Perms, User};

impl KeyPattern {
    /// `~p`, `%R~p` or `%W~p` (`sdsCatPatternString`).
    fn render(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(match self.access {
            KEY_R => b"%R~".as_slice(),
            KEY_W => b"%W~",
            _ => b"~",
        });
        out.extend_from_slice(&self.pattern);
    }
}

impl Perms {
    /// The command rules that rebuild this bitmap (`ACLDescribeSelectorCommandRules`).
    pub(super) fn describe_commands(&self) -> String {
        // The rules are applied to `fake` as they are chosen, so it always shows what
        // they grant so far; `temp` holds what is still to be explained.
        let additive = !self.future;
        let mut fake = Perms::none();
        fake.set_all(!additive);
        let mut rules = String::from(if additive { "-@all " } else { "+@all " });

        let mut temp = Perms::none();
        temp.allowed = self.allowed.clone();
        let mut applied = [false; Category::ALL.len()];
        loop {
            let mut best = None;
            let (mut min_diff, mut max_same) = (usize::MAX, 0);
            for (j, &category) in Category::ALL.iter().enumerate() {
                if applied[j] {
                    continue;
                }
                let (on, off) = UNIVERSE
                    .in_category(category)
                    .fold((0, 0), |(on, off), id| {
                        if temp.allowed.get(id) {
                            (on + 1, off)
                        } else {
                            (on, off + 1)
                        }
                    });
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < min_diff || (diff == min_diff && same > max_same)) {
                    best = Some(j);
                    min_diff = diff;
                    max_same = same;
                }
            }
            let Some(j) = best else { break };
            let category = Category::ALL[j];
            fake.set_category(category, additive);
            temp.set_category(category, !additive);
            rules.push_str(if additive { "+@" } else { "-@" });
            rules.push_str(category.name());
            rules.push(' ');
            applied[j] = true;
        }

        // The single commands still different.
        for &id in UNIVERSE.order() {
            let item = UNIVERSE.item(id);
            let user_bit = self.allowed.get(id);
            if user_bit != fake.allowed.get(id) {
                rules.push(if user_bit { '+' } else { '-' });
                rules.push_str(&item.name);
                rules.push(' ');
                fake.change(id, user_bit);
            }
            if !user_bit && let Some(args) = self.first_args.get(&id) {
                for arg in args {
                    rules.push('+');
                    rules.push_str(&item.name);
                    rules.push('|');
                    rules.push_str(&String::from_utf8_lossy(arg));
                    rules.push(' ');
                }
            }
        }
        debug_assert_eq!(
            fake.allowed, self.allowed,
            "rules {rules} do not rebuild the bitmap"
        );
        rules.pop();
        rules
    }

    /// `ACL GETUSER`'s `keys`: `~*`, or the patterns space-separated.
    fn keys_text(&self) -> Vec<u8> {
        if self.all_keys {
            return b"~*".to_vec();
        }
        let mut out = Vec::new();
        for (i, k) in self.keys.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            k.render(&mut out);
        }
        out
    }

    /// `ACL GETUSER`'s `channels`: `&*`, or the patterns space-separated.
    fn channels_text(&self) -> Vec<u8> {
        if self.all_channels {
            return b"&*".to_vec();
        }
        let mut out = Vec::new();
        for (i, c) in self.channels.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            out.push(b'&');
            out.extend_from_slice(c);
        }
        out
    }

    /// Keys, channels, then command rules (`ACLDescribeSelector`).
    fn describe(&self, out: &mut Vec<u8>) {
        if self.all_keys {
            out.extend_from_slice(b"~* ");
        } else {
            for k in &self.keys {
                k.render(out);
                out.push(b' ');
            }
        }
        if self.all_channels {
            out.extend_from_slice(b"&* ");
        } else {
            out.extend_from_slice(b"resetchannels ");
            for c in &self.channels {
                out.push(b'&');
                out.extend_from_slice(c);
                out.push(b' ');
            }
        }
        out.extend_from_slice(self.describe_commands().as_bytes());
    }
}

impl User {
    /// The user's rules as one line (`ACLDescribeUser`): flags, `#hash` passwords,
    /// keys, channels and command rules, e.g. `on nopass ~* &* +@all`.
    pub fn describe(&self) -> Bytes {
        let mut out = Vec::new();
        for flag in self.flags() {
            out.extend_from_slice(flag.as_bytes());
            out.push(b' ');
        }
        for hash in self.password_hashes() {
            out.push(b'#');
            out.extend_from_slice(hash.as_bytes());
            out.push(b' ');
        }
        self.perms.describe(&mut out);
        out.into()
    }

    /// The user's `ACL LIST` (and ACL file) line: `user <name> <rules>`.
    pub fn acl_list_line(&self) -> Bytes {
        let mut out = b"user ".to_vec();
        out.extend_from_slice(self.name());
        out.push(b' ');
        out.extend_from_slice(&self.describe());
        out.into()
    }

    /// `ACL GETUSER`'s reply: a map of flags (a set), passwords, commands, keys,
    /// channels, and selectors (always none here).
    pub fn getuser_reply(&self) -> Reply {
        let bulk = |b: Vec<u8>| Reply::Bulk(b.into());
        let flags = self.flags().into_iter().map(Reply::bulk).collect();
        let passwords = self
            .password_hashes()
            .iter()
            .map(|h| Reply::bulk(h.clone()))
            .collect();
        Reply::Map(vec![
            (Reply::bulk("flags"), Reply::Set(flags)),
            (Reply::bulk("passwords"), Reply::Array(passwords)),
            (
                Reply::bulk("commands"),
                bulk(self.perms.describe_commands().into_bytes()),
            ),
            (Reply::bulk("keys"), bulk(self.perms.keys_text())),
            (Reply::bulk("channels"), bulk(self.perms.channels_text())),
            (Reply::bulk("selectors"), Reply::Array(Vec::new())),
        ])
    }
}
