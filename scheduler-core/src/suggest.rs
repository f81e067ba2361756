//! "Did you mean": the known name a misspelt one most likely meant, for the errors of an
//! unknown field, handler or flag. Names are compared folded (lower case, without `_` and
//! `-`) by Damerau-Levenshtein distance, within a third of the name's length.

/// The known name a misspelt `key` most likely meant: a typo, a missing or doubled letter,
/// or another case or separator (`retryPolicy`, `Priority`, `max-attempts`), judged on the
/// names folded to lower case without `_` and `-`; `None` when nothing is close.
pub fn closest<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let fold = |s: &str| s.to_lowercase().replace(['_', '-'], "");
    let key = fold(key);
    allowed
        .iter()
        .map(|a| (strsim::damerau_levenshtein(&key, &fold(a)), *a))
        .filter(|(d, a)| *d <= (a.len() / 3).clamp(1, 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn near_names_are_suggested_and_far_ones_not() {
        let known = [
            "priority",
            "timeout",
            "max_retries",
            "http",
            "log",
            "command",
        ];
        assert_eq!(closest("priorty", &known), Some("priority"));
        assert_eq!(closest("Timeout", &known), Some("timeout"));
        assert_eq!(closest("maxRetries", &known), Some("max_retries"));
        assert_eq!(closest("htpt", &known), Some("http"));
        assert_eq!(closest("shell", &known), None);
        assert_eq!(closest("colour", &known), None);
    }
}
