//! Serde for durations as humantime strings (`"30s"`, `"5m"`, `"1h 30m"`).
//!
//! Integers are accepted too and read as milliseconds, so that machine-written JSON (Redis
//! messages, state records) can stay numeric without a second representation.

use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serializer};

/// Serializes as a humantime string.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}

/// Accepts a humantime string or an integer number of milliseconds.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Millis(u64),
    }
    match Raw::deserialize(d)? {
        Raw::Text(t) => parse(&t).map_err(de::Error::custom),
        Raw::Millis(ms) => Ok(Duration::from_millis(ms)),
    }
}

/// Parses a humantime duration, with an error a person can act on.
pub fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("`{text}` is not a duration ({e}); write it like \"30s\", \"5m\" or \"1h 30m\"")
    })
}

/// The same for `Option<Duration>`, `null` or absent meaning `None`.
pub mod option {
    use super::*;

    /// Serializes `Some` as a humantime string and `None` as `null`.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    /// Accepts `null`, a humantime string or milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "super")] Duration);
        Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
    }
}
