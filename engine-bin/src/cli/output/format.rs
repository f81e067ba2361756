//! The shared pieces of every table and line the CLI prints: column alignment, instants,
//! durations, one-line cuts, and the JSON form.
//!
//! Kept apart from the views so each view renders the same cell the same way: a missing
//! instant or duration is `-` everywhere.

use ax_scheduler_core::task::Schedule;
use ax_scheduler_core::UtcMillis;
use serde::Serialize;

/// The next fires, one a line, in UTC and, for a cron in another zone, in that zone too: a
/// `09:30 America/New_York` task reads as written, not only as `14:30:00Z`.
pub fn fire_lines(fires: &[UtcMillis], schedule: &Schedule) -> String {
    if fires.is_empty() {
        return "no future fires\n".to_owned();
    }
    let zone = match schedule {
        Schedule::Cron { timezone, .. } => cron_zone(timezone),
        _ => None,
    };
    fire_lines_in(fires, zone)
}

/// The next fires, one a line, in UTC and on `zone`'s clock.
pub(super) fn fire_lines_in(fires: &[UtcMillis], zone: Option<chrono_tz::Tz>) -> String {
    if fires.is_empty() {
        return "no future fires\n".to_owned();
    }
    let mut out = match zone {
        Some(z) => format!("next {} fire(s), UTC and {z}:\n", fires.len()),
        None => format!("next {} fire(s), UTC:\n", fires.len()),
    };
    for t in fires {
        out.push_str(&format!("  {}\n", zoned(*t, zone)));
    }
    out
}

/// A cron's zone when it is not UTC (where the UTC instant alone reads as written).
pub(super) fn cron_zone(timezone: &str) -> Option<chrono_tz::Tz> {
    (timezone != "UTC")
        .then(|| timezone.parse::<chrono_tz::Tz>().ok())
        .flatten()
}

/// `t` in UTC, then on the wall clock of `zone` when there is one.
pub(super) fn zoned(t: UtcMillis, zone: Option<chrono_tz::Tz>) -> String {
    let local = zone.zip(t.to_datetime()).map(|(z, dt)| {
        format!(
            "  {}",
            dt.with_timezone(&z).format("%Y-%m-%d %H:%M:%S %Z (%:z)")
        )
    });
    format!("{t}{}", local.unwrap_or_default())
}

/// `value` as pretty JSON with a final newline.
pub fn json<T: Serialize>(value: &T) -> String {
    // The API types are plain data: serializing them cannot fail.
    let mut s = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("\"{e}\""));
    s.push('\n');
    s
}

/// Columns padded to their widest cell, two spaces apart; no trailing blanks.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            let pad = widths
                .get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(cell.chars().count())
                + 2;
            line.push_str(&" ".repeat(pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(super) fn instant(t: Option<UtcMillis>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| t.to_string())
}

pub(super) fn millis(ms: Option<u64>) -> String {
    ms.map_or_else(
        || "-".to_owned(),
        |ms| humantime::format_duration(std::time::Duration::from_millis(ms)).to_string(),
    )
}

/// `text` on one line, cut to `max` characters.
pub(super) fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max).collect();
        cut.push_str("...");
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["A", "BB"],
            &[
                vec!["long cell".into(), "x".into()],
                vec!["y".into(), "z".into()],
            ],
        );
        assert_eq!(t, "A          BB\nlong cell  x\ny          z\n");
    }

    #[test]
    fn fires_of_a_zoned_cron_read_in_its_zone_too() {
        let cron = Schedule::Cron {
            expr: "0 30 9 * * *".into(),
            timezone: "America/New_York".into(),
        };
        // 2026-12-02T14:30:00Z is 09:30 in New York (EST, -05:00).
        let fires = [UtcMillis(1_796_221_800_000)];
        assert_eq!(
            fire_lines(&fires, &cron),
            "next 1 fire(s), UTC and America/New_York:\n  \
             2026-12-02T14:30:00.000Z  2026-12-02 09:30:00 EST (-05:00)\n"
        );
        let utc = Schedule::Cron {
            expr: "0 30 9 * * *".into(),
            timezone: "UTC".into(),
        };
        assert_eq!(
            fire_lines(&fires, &utc),
            "next 1 fire(s), UTC:\n  2026-12-02T14:30:00.000Z\n"
        );
        assert_eq!(fire_lines(&[], &utc), "no future fires\n");
    }
}
