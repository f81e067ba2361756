//! Deprecated names kept for one release: a family exported a second time under its old
//! name, so that dashboards and rules written against it go on working while they move.
//!
//! An alias is a view, not a second counter: at each scrape it reads the family it stands
//! for and renames it (and, for the `outcome` label, turns the current words back into the
//! old ones, see [`crate::deprecated_outcome`]). Nothing ever increments it, so it cannot
//! disagree with the current series, and its series exist exactly when those do.

use std::collections::HashMap;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::Registry;

use crate::label::deprecated_outcome;

/// The label whose values an alias translates.
const OUTCOME_LABEL: &str = "outcome";

/// `current` under the deprecated name and HELP text of `desc`.
struct Alias<C> {
    current: C,
    desc: Desc,
}

impl<C: Collector> Collector for Alias<C> {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families = self.current.collect();
        for family in &mut families {
            family.set_name(self.desc.fq_name.clone());
            family.set_help(self.desc.help.clone());
            for metric in family.mut_metric() {
                let mut labels = metric.take_label();
                for label in &mut labels {
                    if label.name() == OUTCOME_LABEL {
                        let old = deprecated_outcome(label.value()).to_owned();
                        label.set_value(old);
                    }
                }
                metric.set_label(labels);
            }
        }
        families
    }
}

/// Registers `current` (named `current_name`, with `labels`) once more on `registry` under
/// the deprecated `name`, with a HELP text that says so.
pub(crate) fn register_alias<C>(
    registry: &Registry,
    current: &C,
    name: &str,
    current_name: &str,
    labels: &[&str],
) -> Result<(), prometheus::Error>
where
    C: Collector + Clone + 'static,
{
    let desc = Desc::new(
        name.to_owned(),
        format!("Deprecated: `{current_name}` under its old name, kept for one release."),
        labels.iter().map(|l| (*l).to_owned()).collect(),
        HashMap::new(),
    )?;
    registry.register(Box::new(Alias {
        current: current.clone(),
        desc,
    }))
}
