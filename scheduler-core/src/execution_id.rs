//! The execution id: one type for the id of an execution everywhere it travels.
//!
//! An execution id is a UUID's 128 bits. Its text form (lowercase, hyphenated) is what the
//! queue's JSON, Redis keys, etcd keys and the API carry, so the type serializes as exactly
//! that string. Parsing accepts what the shells accept (any UUID form `uuid` reads, and 32
//! hex digits with hyphens anywhere), so text is parsed once, at the edge.
//!
//! The ids the scheduler derives rather than draws are computed here, from the bits:
//! a dependency step's id ([`ExecutionId::step`]), a scheduled fire's fan-out id
//! ([`ExecutionId::for_fire`]) and a piece's id ([`ExecutionId::piece`]), so every leader
//! derives the same id and a duplicate is refused by the queue. Fresh ids (UUID v7) are drawn
//! by the shells, which own the clock and the randomness: `ExecutionId::from(Uuid::now_v7())`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::key::TaskKey;
use crate::time::UtcMillis;

/// The low bits of a fan-out id that hold a piece's index (see [`crate::fanout`]).
const INDEX_BITS: u128 = 0xffff;

/// The id of one execution (the same across its retries and redeliveries). Its default is
/// the nil id, which no execution has.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ExecutionId(Uuid);

/// Text that is not an execution id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not an execution id: {0:?}")]
pub struct ParseExecutionIdError(pub String);

impl ExecutionId {
    /// The id of these UUID bits.
    pub const fn from_uuid(id: Uuid) -> Self {
        ExecutionId(id)
    }

    /// The id of these 128 bits.
    pub const fn from_u128(bits: u128) -> Self {
        ExecutionId(Uuid::from_u128(bits))
    }

    /// The id as a UUID.
    pub const fn as_uuid(&self) -> Uuid {
        self.0
    }

    /// The id's 128 bits.
    pub const fn as_u128(&self) -> u128 {
        self.0.as_u128()
    }

    /// The execution id of `child`'s step in `run`: the same on every leader, so a step sent
    /// again is a duplicate to the queue.
    pub fn step(run: ExecutionId, child: &TaskKey) -> Self {
        let mut text = Uuid::encode_buffer();
        Self::derived(
            &[run.0.hyphenated().encode_lower(&mut text).as_bytes()],
            child,
        )
    }

    /// The fan-out id of a scheduled fire of `key` at `fire_at`.
    pub fn for_fire(key: &TaskKey, fire_at: UtcMillis) -> Self {
        // Formatted on the stack: this runs at every fire.
        let mut digits = itoa::Buffer::new();
        Self::derived(&[b"fire@", digits.format(fire_at.0).as_bytes()], key)
    }

    /// A UUID of version 8 (custom) from SHA-256 of the seed (its parts in order) and the
    /// task's key.
    fn derived(seed: &[&[u8]], key: &TaskKey) -> Self {
        let mut hasher = Sha256::new();
        for part in seed {
            hasher.update(part);
        }
        let digest = hasher
            .chain_update([0u8])
            .chain_update(key.namespace.as_bytes())
            .chain_update([0u8])
            .chain_update(key.id.as_bytes())
            .finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        bytes[6] = (bytes[6] & 0x0f) | 0x80;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        ExecutionId(Uuid::from_bytes(bytes))
    }

    /// Piece `index`'s execution id under this fan-out id: its last 16 bits replaced by
    /// `index`.
    pub fn piece(self, index: u32) -> Self {
        Self::from_u128((self.as_u128() & !INDEX_BITS) | u128::from(index) & INDEX_BITS)
    }

    /// The piece index of `execution` if it is one of the `total` pieces of this fan-out id.
    pub fn piece_index(self, execution: ExecutionId, total: u32) -> Option<u32> {
        let (base, execution) = (self.as_u128(), execution.as_u128());
        let index = u32::try_from(execution & INDEX_BITS).ok()?;
        (execution & !INDEX_BITS == base & !INDEX_BITS && index < total).then_some(index)
    }
}

impl From<Uuid> for ExecutionId {
    fn from(id: Uuid) -> Self {
        ExecutionId(id)
    }
}

impl From<ExecutionId> for Uuid {
    fn from(id: ExecutionId) -> Self {
        id.0
    }
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl fmt::Debug for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for ExecutionId {
    type Err = ParseExecutionIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Ok(id) = Uuid::parse_str(text) {
            return Ok(ExecutionId(id));
        }
        // 32 hex digits with hyphens anywhere, as the dispatcher's ids were always read.
        let hex: String = text.chars().filter(|c| *c != '-').collect();
        if hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            if let Ok(bits) = u128::from_str_radix(&hex, 16) {
                return Ok(Self::from_u128(bits));
            }
        }
        Err(ParseExecutionIdError(text.to_owned()))
    }
}

impl Serialize for ExecutionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut buf = Uuid::encode_buffer();
        serializer.serialize_str(self.0.hyphenated().encode_lower(&mut buf))
    }
}

impl<'de> Deserialize<'de> for ExecutionId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ExecutionId;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an execution id (a UUID)")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ExecutionId, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "01234567-89ab-cdef-0123-456789abcdef";

    #[test]
    fn text_is_lowercase_hyphenated_and_parses_back() {
        let id = ExecutionId::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(id.to_string(), TEXT);
        assert_eq!(format!("{id:?}"), TEXT);
        assert_eq!(TEXT.parse::<ExecutionId>(), Ok(id));
        for accepted in [
            "0123456789abcdef0123456789abcdef",
            "0123456789ABCDEF0123456789ABCDEF",
            "{01234567-89ab-cdef-0123-456789abcdef}",
            "urn:uuid:01234567-89ab-cdef-0123-456789abcdef",
            "0123-4567-89ab-cdef-0123-4567-89ab-cdef",
        ] {
            assert_eq!(accepted.parse::<ExecutionId>(), Ok(id), "{accepted}");
        }
        for refused in [
            "",
            "run-1",
            "0123456789abcdef0123456789abcdeg",
            "+123456789abcdef0123456789abcdef",
        ] {
            let err = refused.parse::<ExecutionId>().unwrap_err();
            assert!(err.to_string().starts_with("not an execution id"), "{err}");
        }
    }

    #[test]
    fn serializes_as_its_text() {
        let id = ExecutionId::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{TEXT}\""));
        assert_eq!(json, serde_json::to_string(&id.as_uuid()).unwrap());
        assert_eq!(serde_json::from_str::<ExecutionId>(&json).unwrap(), id);
        assert!(serde_json::from_str::<ExecutionId>("\"nope\"").is_err());
        assert!(serde_json::from_str::<ExecutionId>("7").is_err());
    }

    #[test]
    fn converts_to_and_from_uuid_and_bits() {
        let uuid = Uuid::from_u128(42);
        let id = ExecutionId::from(uuid);
        assert_eq!(Uuid::from(id), uuid);
        assert_eq!(id.as_u128(), 42);
        assert_eq!(ExecutionId::from_u128(42), id);
        assert!(ExecutionId::from_u128(1) < ExecutionId::from_u128(2));
    }

    #[test]
    fn derived_ids_are_stable() {
        let key = TaskKey::new("ns", "c");
        let run = ExecutionId::from_u128(1);
        let a = ExecutionId::step(run, &key);
        assert_eq!(a, ExecutionId::step(run, &key));
        assert_ne!(a, ExecutionId::step(ExecutionId::from_u128(2), &key));
        assert_ne!(a, ExecutionId::step(run, &TaskKey::new("ns", "d")));
        assert_eq!(a.as_uuid().get_version_num(), 8);
        let f = ExecutionId::for_fire(&key, UtcMillis(1_000));
        assert_eq!(f, ExecutionId::for_fire(&key, UtcMillis(1_000)));
        assert_ne!(f, ExecutionId::for_fire(&key, UtcMillis(2_000)));
        // Stored states and queued messages hold ids derived this way: the bytes must not move.
        assert_eq!(
            ExecutionId::for_fire(&TaskKey::new("ns", "t"), UtcMillis(1_000)).to_string(),
            "f7be8814-1e63-85e4-bafb-9d74a9bb5ff7"
        );
        assert_eq!(
            ExecutionId::step(run, &key).to_string(),
            "d6f5e7c5-5980-8756-ae7b-61a4e7c9a69c"
        );
    }

    #[test]
    fn piece_ids_map_back_to_their_fanout() {
        let f = ExecutionId::from_u128(0xabcd_0000_0000_0000_0000_0000_0000_1234);
        let s = f.piece(3);
        assert_eq!(s.as_u128() & 0xffff, 3);
        assert_eq!(f.piece_index(s, 5), Some(3));
        assert_eq!(f.piece_index(s, 3), None);
        assert_eq!(ExecutionId::from_u128(7).piece_index(s, 5), None);
    }
}
