//! Factories by name, as a config key names them: the one map behind every
//! registry of things one can add to (sync rules, group schedules, and the
//! CTR crate's models and row optimizers), and the [`Sections`] of settings
//! that those registered by a user read (`[sync.NAME]`, `[model.NAME]`).

use crate::{Error, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The settings of components registered by name, each in a section named
/// after it (`[sync.my-rule]`, `[model.dcn]`), kept as read until the
/// component's factory reads its own with [`Sections::get`]. A config keeps
/// them beside its own keys (`#[serde(flatten)]`), so a misspelt key lands
/// here too: [`Named::check_sections`] refuses it before a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sections(BTreeMap<String, serde_json::Value>);

impl Sections {
    /// The section `name` of the config section `at` (`"sync"`,
    /// `"model"`), as `T`; `T::default()` when there is none.
    ///
    /// # Errors
    ///
    /// A section `T` cannot read ([`Error::Config`] naming `at.name`).
    pub fn get<T: DeserializeOwned + Default>(&self, at: &str, name: &str) -> Result<T> {
        let Some(section) = self.0.get(name) else {
            return Ok(T::default());
        };
        T::deserialize(section).map_err(|e| Error::Config {
            key: format!("{at}.{name}"),
            reason: e.to_string(),
        })
    }

    /// Adds the section `name` (in place of one of that name).
    pub fn insert(&mut self, name: &str, section: serde_json::Value) {
        self.0.insert(name.to_string(), section);
    }
}

/// Factories `F` by name, for the config key `key`; a name it does not know
/// is an error naming the key and the names it knows.
#[derive(Clone)]
pub struct Named<F> {
    key: &'static str,
    what: &'static str,
    /// Names the key also takes that are made elsewhere (built-in schedules).
    elsewhere: Vec<&'static str>,
    by_name: BTreeMap<String, F>,
}

impl<F> Named<F> {
    /// None yet, for `key`, whose values are `what`s ("sync rule").
    pub fn new(key: &'static str, what: &'static str) -> Self {
        Self {
            key,
            what,
            elsewhere: Vec::new(),
            by_name: BTreeMap::new(),
        }
    }

    /// The same, the key also taking `names` made elsewhere (said among
    /// the known names of an error).
    pub fn also_taking(mut self, names: impl IntoIterator<Item = &'static str>) -> Self {
        self.elsewhere = names.into_iter().collect();
        self
    }

    /// Adds `make` as `name` (in place of one of that name).
    pub fn insert(&mut self, name: &str, make: F) {
        self.by_name.insert(name.to_string(), make);
    }

    /// Whether one is called `name`.
    pub fn knows(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The factory called `name`.
    ///
    /// # Errors
    ///
    /// An unknown name: [`Error::Config`] naming the key and the known names.
    pub fn get(&self, name: &str) -> Result<&F> {
        self.by_name.get(name).ok_or_else(|| {
            let mut known: Vec<&str> = self.elsewhere.clone();
            known.extend(self.by_name.keys().map(String::as_str));
            Error::Config {
                key: self.key.into(),
                reason: format!(
                    "unknown {} {name:?}; known: {}",
                    self.what,
                    known.join(", ")
                ),
            }
        })
    }
}

impl<F> Named<F> {
    /// An error unless every one of `sections` is a table named after
    /// `chosen`, the name the run's key gives (`None`: it names none of
    /// these), and registered here; `choice` says the key's value
    /// (`"model.kind is lr"`). A misspelt key of the config section, or the
    /// section of a component the run does not use, is refused, naming it.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the first such section's key.
    pub fn check_sections(
        &self,
        sections: &Sections,
        chosen: Option<&str>,
        choice: &str,
    ) -> Result<()> {
        let at = self.key.split('.').next().unwrap_or(self.key);
        let misplaced = |(name, value): &(&String, &serde_json::Value)| {
            Some(name.as_str()) != chosen || !value.is_object()
        };
        let Some((name, value)) = sections.0.iter().find(misplaced) else {
            return Ok(());
        };
        let reason = if self.knows(name) && value.is_object() {
            format!(
                "is set, but this run would ignore it: it sets the {} {name}; {choice}",
                self.what
            )
        } else {
            let known: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
            format!(
                "unknown key: neither a setting of [{at}] nor the section of a {} \
                 (known: {})",
                self.what,
                known.join(", ")
            )
        };
        Err(Error::Config {
            key: format!("{at}.{name}"),
            reason,
        })
    }
}

impl<F> fmt::Debug for Named<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.by_name.keys()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_is_an_error_naming_the_key_and_every_known_name() {
        let mut named = Named::new("sync.schedule", "schedule").also_taking(["global"]);
        named.insert("ring", 1);
        named.insert("star", 2);
        assert_eq!(named.get("ring").unwrap(), &1);
        let e = named.get("rign").unwrap_err().to_string();
        assert!(e.contains("sync.schedule") && e.contains("\"rign\""), "{e}");
        assert!(e.contains("known: global, ring, star"), "{e}");
    }

    #[test]
    fn a_section_is_read_when_it_is_the_chosen_ones_and_refused_otherwise() {
        #[derive(Debug, Default, Deserialize, PartialEq)]
        #[serde(deny_unknown_fields)]
        struct Ring {
            width: usize,
        }
        let mut named = Named::new("sync.algorithm", "sync rule");
        named.insert("ring", 1);
        let mut sections = Sections::default();
        assert_eq!(
            sections.get::<Ring>("sync", "ring").unwrap(),
            Ring::default()
        );
        sections.insert("ring", serde_json::json!({"width": 3}));
        assert_eq!(sections.get::<Ring>("sync", "ring").unwrap().width, 3);
        named.check_sections(&sections, Some("ring"), "").unwrap();
        let e = named
            .check_sections(&sections, None, "sync.algorithm is none")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sync.ring") && e.contains("ignore") && e.contains("is none"),
            "{e}"
        );
        sections.insert("ring", serde_json::json!({"widht": 3}));
        let e = sections
            .get::<Ring>("sync", "ring")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sync.ring") && e.contains("widht"), "{e}");
        sections.insert("grup_size", 4.into());
        let e = named
            .check_sections(&sections, Some("ring"), "")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sync.grup_size") && e.contains("unknown key"),
            "{e}"
        );
    }
}
