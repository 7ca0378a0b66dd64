//! The ACL model, with Redis 7.0's semantics and texts: users and their rules, the
//! permission check, `ACL LOG`, the ACL file. Nothing here runs a command: dispatch
//! asks [`User::check`], and the ACL command family answers from [`Users`], [`AclLog`],
//! [`categories`] and [`genpass`].
//!
//! | module | owns |
//! |---|---|
//! | [`categories`] | Redis's categories, and each command's categories and key access |
//! | `commands` | command ids (table rows, then subcommands) and the bitmap over them |
//! | `user` | [`User`] and the `ACL SETUSER` grammar |
//! | `describe` | `ACL LIST` / ACL file lines and the `ACL GETUSER` reply |
//! | `check` | [`User::check`] and the `-NOPERM` texts ([`Denied`]) |
//! | `log` | [`AclLog`] |
//! | `file` | the ACL file and [`genpass`] |
//!
//! This module holds the registry, [`Users`], and the errors ([`AclError`]).

pub mod categories;
mod check;
mod commands;
mod describe;
mod file;
mod log;
mod user;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_check;
#[cfg(test)]
mod tests_model;
#[cfg(test)]
mod tests_redis;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use dmc_resp::Reply;
use thiserror::Error;

pub use categories::Category;
pub use check::Denied;
pub use file::genpass;
pub use log::{AclLog, Context, DEFAULT_MAX_LEN, LogEntry, Reason};
pub use user::{RuleError, User, hash_password};

/// AUTH's and HELLO's refusal of a wrong name, password or disabled user.
pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// An ACL command's error. `Display` is the error reply's text, `ERR` and all.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AclError {
    /// One `ACL SETUSER` rule was refused (none was applied).
    #[error("ERR Error in ACL SETUSER modifier '{op}': {reason}")]
    Modifier { op: String, reason: RuleError },
    #[error("ERR Unmatched parenthesis in acl selector starting at '{0}'.")]
    UnmatchedParenthesis(String),
    #[error("ERR Usernames can't contain spaces or null characters")]
    BadUsername,
    #[error("ERR The 'default' user cannot be removed")]
    DeleteDefault,
    /// `ACL CAT` of no category (the name cut at 128 bytes, as Redis's `%.128s`).
    #[error("ERR Unknown category '{0}'")]
    UnknownCategory(String),
    #[error(
        "ERR ACL GENPASS argument must be the number of bits for the output password, a \
         positive number up to 4096"
    )]
    GenpassRange,
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    /// `ACL LOAD`: every problem of the file, in one line.
    #[error("ERR {0}")]
    Load(String),
}

impl AclError {
    /// The error reply.
    pub fn reply(&self) -> Reply {
        Reply::Error(self.to_string())
    }
}

/// `ACL CAT`: the categories' names, in Redis's order.
pub fn category_names() -> Vec<&'static str> {
    Category::ALL.iter().map(|c| c.name()).collect()
}

/// `ACL CAT <category>`: the commands (and `container|sub`s) of DMC's table in it.
pub fn commands_in_category(name: &[u8]) -> Result<Vec<&'static str>, AclError> {
    let category = Category::from_name(name).ok_or_else(|| {
        let shown = name.get(..128).unwrap_or(name);
        AclError::UnknownCategory(String::from_utf8_lossy(shown).into_owned())
    })?;
    Ok(commands::UNIVERSE
        .in_category(category)
        .map(|id| commands::UNIVERSE.item(id).name.as_str())
        .collect())
}

/// The categories of a command (`get`) or subcommand (`config|get`), for `COMMAND
/// INFO` and `COMMAND DOCS`; `None` for a name DMC's table does not have.
pub fn categories_of(name: &str) -> Option<Vec<Category>> {
    let id = commands::UNIVERSE.lookup(name.as_bytes())?;
    let bits = commands::UNIVERSE.item(id).categories;
    Some(
        Category::ALL
            .into_iter()
            .filter(|c| bits & c.bit() != 0)
            .collect(),
    )
}

/// The users, by name; `default` is always one of them.
#[derive(Debug, Clone)]
pub struct Users {
    users: BTreeMap<Bytes, Arc<User>>,
}

const DEFAULT: &[u8] = b"default";

impl Default for Users {
    fn default() -> Self {
        Users::new(None)
    }
}

impl Users {
    /// Only the default user: `on nopass ~* &* +@all`, or with `requirepass`'s hash.
    pub fn new(requirepass: Option<&[u8]>) -> Users {
        Users::from_map(BTreeMap::new()).with_requirepass(requirepass)
    }

    /// `users`, with the usual default user if it has none.
    fn from_map(mut users: BTreeMap<Bytes, Arc<User>>) -> Users {
        users
            .entry(Bytes::from_static(DEFAULT))
            .or_insert_with(|| Arc::new(User::default_user(None)));
        Users { users }
    }

    fn with_requirepass(mut self, requirepass: Option<&[u8]>) -> Users {
        self.set_requirepass(requirepass);
        self
    }

    /// `requirepass` (`CONFIG SET` or the configuration): the default user's only
    /// password, or `nopass` for none.
    pub fn set_requirepass(&mut self, requirepass: Option<&[u8]>) {
        let mut user = User::clone(&self.default_user());
        user.set_requirepass(requirepass);
        self.users
            .insert(Bytes::from_static(DEFAULT), Arc::new(user));
    }

    /// The user named `name`.
    pub fn get(&self, name: &[u8]) -> Option<Arc<User>> {
        self.users.get(name).cloned()
    }

    /// The default user.
    pub fn default_user(&self) -> Arc<User> {
        self.get(DEFAULT)
            .unwrap_or_else(|| Arc::new(User::default_user(None)))
    }

    /// Every user, in name order (bytewise, as Redis's radix tree).
    pub fn users(&self) -> impl Iterator<Item = &Arc<User>> {
        self.users.values()
    }

    /// `ACL USERS`.
    pub fn names(&self) -> Vec<Bytes> {
        self.users.keys().cloned().collect()
    }

    /// `ACL LIST`.
    pub fn list(&self) -> Vec<Bytes> {
        self.users().map(|u| u.acl_list_line()).collect()
    }

    /// `ACL SETUSER name rules...`: changes the user, or creates it (off, nothing
    /// allowed) and applies the rules; all rules or none. The new user is returned: its
    /// connections should check with it from now on.
    pub fn setuser<R: AsRef<[u8]>>(
        &mut self,
        name: &[u8],
        rules: &[R],
    ) -> Result<Arc<User>, AclError> {
        if has_bad_name(name) {
            return Err(AclError::BadUsername);
        }
        let mut user = match self.users.get(name) {
            Some(u) => User::clone(u),
            None => User::new(Bytes::copy_from_slice(name)),
        };
        user.apply_rules(rules)?;
        let user = Arc::new(user);
        self.users
            .insert(Bytes::copy_from_slice(name), Arc::clone(&user));
        Ok(user)
    }

    /// `ACL DELUSER name...`: removes those that exist (none if `default` is named) and
    /// returns them, so that their connections can be closed.
    pub fn deluser<N: AsRef<[u8]>>(&mut self, names: &[N]) -> Result<Vec<Arc<User>>, AclError> {
        if names.iter().any(|n| n.as_ref() == DEFAULT) {
            return Err(AclError::DeleteDefault);
        }
        Ok(names
            .iter()
            .filter_map(|n| self.users.remove(n.as_ref()))
            .collect())
    }

    /// AUTH's question (`ACLCheckUserCredentials`): the user, if it exists, is enabled
    /// and `password` is one of its own. `None` answers [`WRONGPASS`] and logs a
    /// [`Reason::Auth`] entry.
    pub fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<Arc<User>> {
        self.get(name)
            .filter(|u| u.enabled() && u.check_password(password))
    }
}

/// `ACL SETUSER`'s username check.
fn has_bad_name(name: &[u8]) -> bool {
    user::has_spaces(name)
}
