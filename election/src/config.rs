//! Election settings with their documented defaults.
//!
//! The TTL is the one knob that trades failover time against tolerance of slow renewals: a
//! successor takes over at most one TTL after a leader dies, and a leader whose renewals
//! stall for TTL - TTL/3 stops acting. etcd leases count whole seconds, so the TTL is
//! rounded up to a whole second, and etcd refuses leases under about 2 s.

use std::time::Duration;

use crate::error::ElectionError;

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "/scheduler";
/// Default lease TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Smallest TTL accepted.
pub const MIN_TTL: Duration = Duration::from_secs(2);

/// Settings shared by elections, task locks and instance records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionConfig {
    /// Key prefix everything lives under; default `/scheduler`.
    pub prefix: String,
    /// Lease TTL; default 10 s, at least 2 s, rounded up to whole seconds.
    pub ttl: Duration,
    /// Deadline of every single etcd request; default 5 s.
    pub request_timeout: Duration,
}

impl Default for ElectionConfig {
    fn default() -> Self {
        ElectionConfig {
            prefix: DEFAULT_PREFIX.to_string(),
            ttl: DEFAULT_TTL,
            request_timeout: Duration::from_secs(5),
        }
    }
}

impl ElectionConfig {
    /// Checks the settings: TTL at least [`MIN_TTL`], a non-zero request timeout.
    pub fn validate(&self) -> Result<(), ElectionError> {
        if self.ttl < MIN_TTL {
            return Err(ElectionError::InvalidConfig(format!(
                "ttl {:?} is below the minimum of {:?}",
                self.ttl, MIN_TTL
            )));
        }
        if self.request_timeout.is_zero() {
            return Err(ElectionError::InvalidConfig(
                "request_timeout must be above zero".to_string(),
            ));
        }
        Ok(())
    }

    /// The TTL in whole seconds, rounded up, as etcd takes it.
    pub(crate) fn ttl_secs(&self) -> i64 {
        let secs = self.ttl.as_secs() + u64::from(self.ttl.subsec_nanos() > 0);
        i64::try_from(secs).unwrap_or(i64::MAX)
    }

    /// The TTL etcd actually applies.
    pub(crate) fn effective_ttl(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.ttl_secs()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rounds_up_and_minimum_is_enforced() {
        let mut c = ElectionConfig::default();
        assert_eq!(c.ttl_secs(), 10);
        c.ttl = Duration::from_millis(2500);
        assert_eq!(c.ttl_secs(), 3);
        assert!(c.validate().is_ok());
        c.ttl = Duration::from_millis(1999);
        assert!(matches!(c.validate(), Err(ElectionError::InvalidConfig(_))));
    }
}
